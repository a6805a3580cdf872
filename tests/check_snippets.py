#!/usr/bin/env python3
"""Fails if a snippet quoted in the docs differs from the compiled example it is cut from.

A snippet is the text between two `// [name]` markers in an example (`# [name]` in Python); the docs quote it
dedented by the marker's indentation.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
quotes = {
    "examples/plan_batch.cpp": ["README.md"],
    "examples/mpi_data_path.cpp": ["docs/data-path.md"],
    "examples/custom_cost.cpp": ["docs/policies.md"],
    "examples/cpu_trainer.cpp": ["docs/integration.md"],
    "examples/gpu_trainer.cpp": ["docs/integration.md"],
    "examples/attention_policy.cpp": ["docs/kernels.md"],
    "examples/custom_packing.cpp": ["docs/policies.md"],
    "python/examples/plan_batch.py": ["docs/python.md"],
    "python/examples/custom_cost.py": ["docs/python.md"],
    "python/examples/megatron_drop_in.py": ["docs/python.md"],
    "python/examples/verl_ranks.py": ["docs/python.md"],
    "python/examples/megatron_dev.py": ["docs/python.md"],
    "python/examples/megatron_main.py": ["docs/python.md"],
}
failed = False
for source, docs in quotes.items():
    text = (root / source).read_text()
    for match in re.finditer(r"^( *)(//|#) \[([\w-]+)\]\n(.*?)^\1\2 \[\3\]\n", text, re.M | re.S):
        indent = len(match.group(1))
        name = match.group(3)
        snippet = "\n".join(line[indent:] for line in match.group(4).rstrip().splitlines())
        for doc in docs:
            if snippet not in (root / doc).read_text():
                print(f"{doc} does not quote [{name}] of {source} as it is now")
                failed = True
            else:
                print(f"ok: {doc} quotes [{name}] of {source}")
sys.exit(1 if failed else 0)
