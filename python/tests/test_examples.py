"""The examples docs/python.md quotes run as they are; a recipe for a stack runs against the
stand-in modules its docstring names (`stand-in: TREE`, standins/README.md)."""
import contextlib
import pathlib
import re
import runpy

import pytest

import standins

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path, capsys):
    tree = re.search(r"^stand-in: (\w+)", path.read_text(), re.M)
    with standins.use(tree.group(1)) if tree else contextlib.nullcontext():
        runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out  # each prints what it planned
