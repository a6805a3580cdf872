import json
import os
import pathlib

import pytest


@pytest.fixture(scope="session")
def cli():
    """Path of the dcpp-plan CLI (meson test sets DCPP_PLAN)."""
    path = os.environ.get("DCPP_PLAN")
    if not path or not os.path.exists(path):
        pytest.skip("DCPP_PLAN is not set: run through `meson test --suite python`")
    return path


def _workloads():
    root = os.environ.get("DCPP_REFERENCE_WORKLOADS")
    if not root or not os.path.isdir(root):
        return []
    return sorted(
        p for p in pathlib.Path(root).glob("*.json") if not p.name.endswith(".megatron_dcp_plan.json")
    )


WORKLOADS = _workloads()


def load(path):
    w = json.loads(pathlib.Path(path).read_text())
    return {
        "name": path.stem,
        "path": str(path),
        "lengths": w["seqlens"],
        "world_size": w["total_gpus"],
        "max_tokens_per_rank": w["max_seq_len_per_rank"],
        "min_cp": w.get("min_cp_size", 1),
        "microbatch_multiple": w.get("vpp_microbatch_group_size") or 1,
    }


def workload_params():
    if not WORKLOADS:
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared/workloads is absent"))]
    return [pytest.param(p, id=p.stem) for p in WORKLOADS]
