#!/usr/bin/env python3
"""Reads the kernels' sm_90 (or sm_80) machine code and prints what decides their speed.

No GPU runs here, so the SASS is the measurement: per kernel, registers, spills and stack from
ptxas, the dynamic shared memory the launch asks for (from tools/attention_config.cpp's table
when given), blocks per SM by registers and shared memory, and for the *main loop* (the loop
holding the most tensor-core instructions, HMMA) its instruction count, HMMA, instructions per
HMMA, cp.async (LDGSTS), ldmatrix (LDSM), shared loads/stores, barriers and the widths of its
global loads. With --check it fails (exit 1) when a main loop of an attention kernel has a 2-byte
global load, no cp.async, no ldmatrix, or (forward kernels) more instructions per HMMA than
--max-per-hmma (default 11: a third of the 33 of the kernel this structure replaced).

usage: sass_report.py --nvcc NVCC --nvdisasm NVDISASM|auto --root ROOT [--arch sm_90]
                      [--config TABLE | --config-command PROGRAM] [--filter TEXT] [--check]
                      [--max-per-hmma N]
(--nvdisasm auto: from PATH or the nvidia-cuda-nvdisasm wheel; exit 77 when there is none)
                      FILE.cu...
"""
import argparse
import collections
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);")
LABEL = re.compile(r"^(\.L_x_\d+):")
BRANCH_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
FUNCTION = re.compile(r"^\s*\.text\.(\S+):")

# H100 SXM (sm_90) and A100 (sm_80) per-SM limits: registers, shared memory per SM usable by
# blocks (228 KB / 164 KB, of which 1 KB per block is reserved by the runtime), blocks, threads.
LIMITS = {"sm_90": (65536, 233472, 32, 2048), "sm_80": (65536, 167936, 32, 2048)}


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.splitlines()
        return dict(zip(names, out))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def cache_key(args, source, flags):
    """What the cubin and ptxas's report depend on: nvcc's version, the flags, the source's path
    and every file under ROOT/include and ROOT/kernels (the only headers of the project the
    kernels include), by path and content. Any change there compiles again."""
    h = hashlib.sha256()
    version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True).stdout
    h.update(version.encode())
    h.update("\0".join(flags).encode())
    h.update(os.path.relpath(os.path.realpath(source), os.path.realpath(args.root)).encode())
    for top in ("include", "kernels"):
        base = os.path.join(args.root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, args.root).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("DCPP_SASS_CACHE") or os.path.join(base, "dcpp", "sass")


def compile_cubin(args, source, cubin):
    """Compiles `source` to `cubin` and returns ptxas's usage per kernel. A compile of the same
    inputs (cache_key) is taken from the cache directory (DCPP_SASS_CACHE, else
    ~/.cache/dcpp/sass): ccache does not cache -cubin, and each architecture's compile of the
    attention instances takes minutes."""
    flags = ["-std=c++20", "--expt-relaxed-constexpr", "--extended-lambda", "-cubin",
             f"-arch={args.arch}", "-Xptxas=-v"]
    key = cache_key(args, source, flags)
    cached = os.path.join(cache_dir(), key)
    if os.path.isfile(cached + ".cubin") and os.path.isfile(cached + ".txt"):
        shutil.copyfile(cached + ".cubin", cubin)
        with open(cached + ".txt") as f:
            report = f.read()
    else:
        cmd = [args.nvcc, *flags[:3], f"-I{os.path.join(args.root, 'include')}",
               f"-I{os.path.join(args.root, 'kernels')}", *flags[3:], source, "-o", cubin]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"sass_report: nvcc failed on {source}:\n{result.stdout}{result.stderr}")
        report = result.stdout + result.stderr
        # a cache that cannot be written is no error (the next run compiles again), and a
        # failed write leaves no temporary file behind
        tmp = None
        try:
            os.makedirs(cache_dir(), exist_ok=True)
            for suffix in (".cubin", ".txt"):  # the report last: a hit needs both
                fd, tmp = tempfile.mkstemp(dir=cache_dir())
                with os.fdopen(fd, "wb") as out:
                    if suffix == ".cubin":
                        with open(cubin, "rb") as f:
                            shutil.copyfileobj(f, out)
                    else:
                        out.write(report.encode())
                os.replace(tmp, cached + suffix)
                tmp = None
        except OSError:
            if tmp is not None and os.path.exists(tmp):
                os.remove(tmp)
    usage = {}
    current = None
    for line in report.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            current = m.group(1)
            usage[current] = {}
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m and current:
            usage[current].update(frame=int(m.group(1)), spill_st=int(m.group(2)),
                                  spill_ld=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            usage[current]["regs"] = int(m.group(1))
            m2 = re.search(r"(\d+) bytes smem", line)
            usage[current]["static_smem"] = int(m2.group(1)) if m2 else 0
    return usage


def parse_functions(sass):
    functions = collections.OrderedDict()
    name = None
    for line in sass.splitlines():
        m = FUNCTION.match(line)
        if m:
            name = m.group(1)
            functions[name] = []
            continue
        if name is None:
            continue
        m = LABEL.match(line)
        if m:
            functions[name].append(("label", m.group(1), None))
            continue
        m = INSTRUCTION.match(line)
        if m:
            functions[name].append(("insn", int(m.group(1), 16), (m.group(3), m.group(4))))
    return functions


def loops(body):
    """(start, end) index ranges of the instructions between a label and a branch back to it."""
    labels, result = {}, []
    index = 0
    for kind, a, b in body:
        if kind == "label":
            labels[a] = index
        else:
            opcode, operands = b
            if opcode.startswith("BRA"):
                m = BRANCH_TARGET.search(operands)
                if m and m.group(1) in labels and labels[m.group(1)] <= index:
                    result.append((labels[m.group(1)], index + 1))
            index += 1
    return result


def stats(insns):
    s = collections.Counter()
    widths = collections.Counter()
    for opcode, _ in insns:
        s["insns"] += 1
        base = opcode.split(".")[0]
        if base == "HMMA":
            s["hmma"] += 1
        elif base == "LDGSTS":
            s["ldgsts"] += 1
            s["ldgsts128"] += ".128" in opcode
        elif base == "LDSM":
            s["ldsm"] += 1
        elif base == "LDS":
            s["lds"] += 1
        elif base == "STS":
            s["sts"] += 1
        elif base == "BAR":
            s["bar"] += 1
        elif base in ("LDG", "STG", "RED", "ATOM"):
            parts = opcode.split(".")
            width = next((p for p in parts[1:] if p in ("U8", "S8", "U16", "S16", "64", "128")),
                         "32")
            widths[f"{base}.{width}"] += 1
        elif base in ("MUFU",):
            s["mufu"] += 1
        elif base in ("SHFL",):
            s["shfl"] += 1
    return s, widths


def find_nvdisasm():
    import glob
    import shutil
    import site
    found = shutil.which("nvdisasm")
    if found:
        return found
    roots = site.getsitepackages() + [site.getusersitepackages()]
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "nvidia", "*", "bin", "nvdisasm"))):
            return path
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--nvdisasm", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--config", help="table from attention_config: kernel-name-part threads shared")
    ap.add_argument("--config-command", help="a program printing that table (tools/attention_config)")
    ap.add_argument("--filter", default="")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--max-per-hmma", type=float, default=11.0)
    ap.add_argument("sources", nargs="+")
    args = ap.parse_args()

    if args.nvdisasm == "auto":
        args.nvdisasm = find_nvdisasm()
        if args.nvdisasm is None:
            print("sass_report: nvdisasm not found (pip install nvidia-cuda-nvdisasm); skipped")
            return 77
    config = []
    lines = []
    if args.config:
        lines = open(args.config).read().splitlines()
    if args.config_command:
        lines = subprocess.run([args.config_command], capture_output=True, text=True,
                               check=True).stdout.splitlines()
    if lines:
        for line in lines:
            parts = line.split()
            if len(parts) == 3:
                config.append((parts[0], int(parts[1]), int(parts[2])))

    failures = []
    regs_limit, smem_limit, block_limit, thread_limit = LIMITS.get(args.arch, LIMITS["sm_90"])
    print(f"{'kernel':<46} {'regs':>4} {'spill':>5} {'smem':>7} {'blk/SM':>6} | main loop: "
          f"{'insns':>5} {'HMMA':>4} {'/HMMA':>5} {'cp.async':>8} {'LDSM':>4} {'LDS':>4} "
          f"{'STS':>4} {'BAR':>3} {'MUFU':>4}  global")
    with tempfile.TemporaryDirectory() as tmp:
        for source in args.sources:
            cubin = os.path.join(tmp, "k.cubin")
            usage = compile_cubin(args, source, cubin)
            sass = subprocess.run([args.nvdisasm, "-c", cubin], capture_output=True, text=True,
                                  check=True).stdout
            functions = parse_functions(sass)
            names = demangle(list(functions))
            for mangled, body in functions.items():
                pretty = names.get(mangled, mangled)
                if args.filter not in pretty:
                    continue
                short = re.sub(r"dcpp::(kernels::)?", "", pretty)
                short = re.sub(r"\((.*)\)$", "", short).replace("bfloat16", "bf16")
                insns = [b for kind, _, b in body if kind == "insn"]
                best = None
                masked_insns = None  # a second instance of the main loop (the one with masks)
                ranges = loops(body)
                has_hmma = {r: any(op.startswith("HMMA") for op, _ in insns[r[0]:r[1]])
                            for r in ranges}
                for start, end in ranges:
                    # innermost loops only: an outer loop around the clean and the masked
                    # instance (dK/dV's loop over query heads) would count both
                    if any(r != (start, end) and start <= r[0] and r[1] <= end and has_hmma[r]
                           for r in ranges):
                        continue
                    loop_stats, loop_widths = stats(insns[start:end])
                    key = (loop_stats["hmma"], -loop_stats["insns"])
                    if best is not None and key[0] == best[0][0]:
                        masked_insns = max(masked_insns or 0, -min(key[1], best[0][1]))
                    elif best is not None and key[0] > best[0][0]:
                        masked_insns = None  # a twin of a loop that is no longer the main one
                    if best is None or key > best[0]:
                        best = (key, loop_stats, loop_widths)
                u = usage.get(mangled, {})
                regs = u.get("regs", 0)
                spill = u.get("spill_st", 0) + u.get("spill_ld", 0) + u.get("frame", 0)
                threads, dyn = next(((t, b) for part, t, b in config if part in mangled),
                                    (0, 0))
                smem = dyn + u.get("static_smem", 0)
                blocks = "-"
                if threads:
                    per_block_regs = ((regs * 32 + 255) // 256 * 256) * (threads // 32)
                    by_regs = regs_limit // per_block_regs if per_block_regs else block_limit
                    by_smem = smem_limit // (smem + 1024) if smem else block_limit
                    blocks = str(min(by_regs, by_smem, block_limit, thread_limit // threads))
                line = f"{short[:46]:<46} {regs:>4} {spill:>5} {smem:>7} {blocks:>6} |"
                if best and best[1]["hmma"]:
                    s, w = best[1], best[2]
                    per = s["insns"] / s["hmma"]
                    glob = " ".join(f"{k}x{v}" for k, v in sorted(w.items())) or "none"
                    line += (f" {s['insns']:>5} {s['hmma']:>4} {per:>5.1f} {s['ldgsts']:>8} "
                             f"{s['ldsm']:>4} {s['lds']:>4} {s['sts']:>4} {s['bar']:>3} "
                             f"{s['mufu']:>4}  {glob}")
                    if masked_insns:
                        line += f"  (masked loop {masked_insns})"
                    if args.check and "attention" in pretty:
                        narrow = [k for k in w if k.startswith("LDG.") and
                                  k.split(".")[1] in ("U16", "S16", "U8", "S8")]
                        if narrow:
                            failures.append(f"{short}: 2-byte global loads in the main loop "
                                            f"({', '.join(narrow)})")
                        if not s["ldgsts"]:
                            failures.append(f"{short}: no cp.async in the main loop")
                        if not s["ldsm"]:
                            failures.append(f"{short}: no ldmatrix in the main loop")
                        if "forward" in pretty and per > args.max_per_hmma:
                            failures.append(f"{short}: {per:.1f} instructions per HMMA in the "
                                            f"main loop (limit {args.max_per_hmma})")
                else:
                    line += " (no tensor-core loop)"
                if args.check and spill:
                    failures.append(f"{short}: {spill} bytes of spills or stack")
                print(line)
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
