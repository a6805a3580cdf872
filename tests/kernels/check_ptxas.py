#!/usr/bin/env python3
"""Compiles kernel sources with nvcc for sm_80 and sm_90 and checks ptxas's resource report.

Fails when a kernel spills registers or uses a stack frame (local memory), unless the kernel's
name contains an entry of kernels/ptxas_allowed.txt, each of which must carry a justification
after '#'. Prints one line per (kernel, architecture) with registers and shared memory.

usage: check_ptxas.py NVCC SOURCE_ROOT FILE.cu...
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

nvcc, root = sys.argv[1], pathlib.Path(sys.argv[2])
sources = sys.argv[3:]
allowed = {}
allow_file = root / "kernels" / "ptxas_allowed.txt"
if allow_file.exists():
    for line in allow_file.read_text().splitlines():
        if line.strip() and not line.startswith("//"):
            name, _, why = line.partition("#")
            if not why.strip():
                sys.exit(f"{allow_file}: '{name.strip()}' has no justification after '#'")
            allowed[name.strip()] = why.strip()

# Through ccache when there is one: it keeps ptxas's report (the compiler's stderr) with the
# object and replays it, so a second run of the same sources compiles nothing. The command runs
# in the source root with relative paths and writes a real object file (ccache caches no output
# to /dev/null), so that another clone of the same commit, such as CI's, hits the same entry.
ccache = shutil.which("ccache")
failed = False
tmp = tempfile.TemporaryDirectory()
for source in sources:
    source = os.path.relpath(pathlib.Path(source).resolve(), root.resolve())
    cmd = ([ccache] if ccache else []) + [
           nvcc, "-std=c++20", "--expt-relaxed-constexpr", "--extended-lambda",
           "-Iinclude", "-Ikernels",
           "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
           "-Xptxas=-v", "-Werror=all-warnings", "-c", source,
           "-o", os.path.join(tmp.name, "kernels.o")]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
    if result.returncode != 0:
        print(result.stdout + result.stderr)
        sys.exit(f"nvcc failed on {source}")
    current = None
    for line in (result.stdout + result.stderr).splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for '(sm_\d+)'", line)
        if m:
            current = [m.group(1), m.group(2)]
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m and current:
            frame, stores, loads = map(int, m.groups())
            current += [frame, stores, loads]
            continue
        m = re.search(r"Used (\d+) registers.*?(?:(\d+) bytes smem)?", line)
        if m and current and len(current) == 5:
            name, arch, frame, stores, loads = current
            bad = frame or stores or loads
            excuse = next((why for key, why in allowed.items() if key in name), None)
            status = "ok" if not bad else ("allowed: " + excuse if excuse else "FAIL")
            print(f"{arch} {m.group(1):>3} regs  frame {frame:>4}  spill {stores:>4}/{loads:<4} "
                  f"{status:<8} {name}")
            if bad and not excuse:
                failed = True
            current = None
sys.exit(1 if failed else 0)
