"""Puts one tree of stand-in modules (standins/README.md) on sys.path for a while."""
import contextlib
import pathlib
import sys

ROOT = pathlib.Path(__file__).parent / "standins"
TREES = {"dev": ["dev"], "main": ["main"], "verl": ["verl", "dev"]}


def _forget():
    for name in list(sys.modules):
        if name.split(".")[0] in ("megatron", "verl"):
            del sys.modules[name]


@contextlib.contextmanager
def use(tree):
    """Megatron-LM dev's modules ("dev"), main's ("main") or verl's with dev's ("verl")."""
    paths = [str(ROOT / part) for part in TREES[tree]]
    _forget()
    sys.path[:0] = paths
    try:
        yield
    finally:
        for p in paths:
            sys.path.remove(p)
        _forget()
