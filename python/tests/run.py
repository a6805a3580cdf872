#!/usr/bin/env python3
"""Builds the Python package into a venv under the build directory and runs its pytest suite.

Called by `meson test` (suite `python`): run.py SOURCE_ROOT BUILD_DIR [pytest args]; with
--install-only as the third argument it stops after installing (./dev.sh bench python). The venv
(BUILD_DIR/python-venv) gets the pinned build requirements of pyproject.toml plus numpy and
pytest once; the package is then installed with `pip install --no-build-isolation` and an
incremental Meson build directory (BUILD_DIR/python-build), as `pip install .` would build it.
"""
import os
import pathlib
import re
import subprocess
import sys
import venv

root = pathlib.Path(sys.argv[1]).resolve()
build = pathlib.Path(sys.argv[2]).resolve()
env_dir = build / "python-venv"
python = env_dir / "bin" / "python"


def run(*args, **kw):
    print("+", " ".join(str(a) for a in args), flush=True)
    subprocess.run([str(a) for a in args], check=True, **kw)


# the pins: pyproject's build requirements and test extra, and numpy
text = (root / "pyproject.toml").read_text()
requires = re.search(r"^requires = \[(.*?)\]", text, re.M | re.S).group(1)
pins = re.findall(r'"([^"]+)"', requires)
pins += re.findall(r'"(pytest==[^"]+)"', text) + ["numpy==2.4.6"]
marker = env_dir / "dcpp-pins.txt"
if not python.exists() or not marker.exists() or marker.read_text() != "\n".join(pins):
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins)
    marker.write_text("\n".join(pins))
run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-build-isolation",
    f"-Cbuild-dir={build / 'python-build'}", root)
if sys.argv[3:4] == ["--install-only"]:
    sys.exit(0)
# pytest from outside the source tree's python/ folder, so that the installed package is tested
os.chdir(build)
result = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         str(root / "python" / "tests"), *sys.argv[3:]])
sys.exit(result.returncode)
