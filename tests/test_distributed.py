"""DDP, DDPOptimizer buckets, FSDP2 and DTensor with the prototype: 2 gloo processes on CPU, against eager.

Both ranks run tests/dist_worker.py once (every scenario, eager and compiled, in one process per rank: imports
and process-group setup dominate the cost); the tests below compare what each rank recorded. The workers pass
the backend as a callable, ``predispatch_views.backend("aot_eager")``: the by-name form
``backend="predispatch_views"`` depends on the package's Dynamo registration in the worker process (the
first-contact issue).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.parity_utils import assert_same

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300  # a hung collective must not hang CI; the run takes ~10 s of CPU per rank


def run_ranks(tmp: Path, inner: str = "aot_eager", scenarios: list[str] | None = None) -> list[dict[str, Any]]:
    """Both ranks of tests/dist_worker.py; what each recorded."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PV_INNER": inner}
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    names = [",".join(scenarios)] if scenarios else []
    worker = [sys.executable, "-m", "tests.dist_worker"]
    procs = [
        subprocess.Popen(
            [*worker, str(rank), str(tmp / "store"), str(tmp / f"rank{rank}.pt"), *names],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=TIMEOUT_S)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"the 2-rank run did not finish in {TIMEOUT_S} s")
    results = []
    for rank, (p, log) in enumerate(zip(procs, logs)):
        path = tmp / f"rank{rank}.pt"
        result = torch.load(path, weights_only=False) if path.exists() else {}
        assert p.returncode == 0 and "error" not in result, result.get("error") or log[-4000:]
        results.append(result)
    return results


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_ranks(tmp_path_factory.mktemp("dist"))


def _assert_training_matches(eager: dict[str, Any], compiled: dict[str, Any], rtol: float = 1e-5) -> None:
    torch.testing.assert_close(compiled["losses"], eager["losses"], rtol=rtol, atol=rtol / 10)
    for name, p in eager["params"].items():
        torch.testing.assert_close(compiled["params"][name], p, rtol=rtol, atol=rtol / 10, msg=name)
    for key in ("aliases", "view_nodes", "mutate_unbind_output", "mutate_split_output"):
        assert_same(compiled[key], eager[key])
    # The comparison is not vacuous: eager's outputs are multi-output views and mutating them raises.
    assert {"SplitBackward0", "SplitWithSizesBackward0", "UnbindBackward0"} <= set(eager["view_nodes"])
    assert eager["mutate_unbind_output"][0] == "raised" and "Output 3 of Unbind" in eager["mutate_unbind_output"][2]


def _epilogues(compiled: dict[str, Any]) -> list[str]:
    assert [p["fallback"] for p in compiled["programs"]] == [None] * len(compiled["programs"])
    return [p["epilogue"] for p in compiled["programs"] if p["epilogue"] is not None]


@pytest.mark.parametrize("rank", [0, 1])
def test_ddp_one_bucket_matches_eager(ranks: list[dict[str, Any]], rank: int) -> None:
    run = ranks[rank]["ddp_one_bucket"]
    _assert_training_matches(run["eager"], run["compiled"])
    assert len(run["compiled"]["programs"]) == 1
    assert len(_epilogues(run["compiled"])) == 1


@pytest.mark.parametrize("rank", [0, 1])
def test_ddp_optimizer_buckets_match_eager(ranks: list[dict[str, Any]], rank: int) -> None:
    """DDPOptimizer splits the graph per bucket; only the last submodule returns views and has an epilogue."""
    run = ranks[rank]["ddp_buckets"]
    assert run["compiled"]["optimize_ddp"]
    _assert_training_matches(run["eager"], run["compiled"])
    programs = run["compiled"]["programs"]
    assert len(programs) >= 3, programs
    assert len(_epilogues(run["compiled"])) == 1
    assert programs[-1]["epilogue"] is not None
    assert all(p["notes"] == ["no view outputs"] for p in programs[:-1])


@pytest.mark.parametrize("rank", [0, 1])
def test_fsdp2_matches_eager(ranks: list[dict[str, Any]], rank: int) -> None:
    """fully_shard per layer: Dynamo compiles each module's forward apart (FSDP2's hooks run outside)."""
    run = ranks[rank]["fsdp2"]
    _assert_training_matches(run["eager"], run["compiled"])
    assert len(_epilogues(run["compiled"])) == 1


@pytest.mark.parametrize("placement", ["shard0", "replicate"])
@pytest.mark.parametrize("rank", [0, 1])
def test_dtensor_views_replay_as_dtensor_views(ranks: list[dict[str, Any]], rank: int, placement: str) -> None:
    _assert_dtensor_matches(ranks[rank][f"dtensor_{placement}"])


def _assert_dtensor_matches(run: dict[str, Any]) -> None:
    eager, compiled = run["eager"], run["compiled"]
    for key in ("types", "placements", "values", "local_is_view", "aliases", "view_nodes", "grad", "mutate_output"):
        assert_same(compiled[key], eager[key])
    assert set(eager["types"]) == {"DTensor"} and all(eager["local_is_view"])
    assert eager["view_nodes"]["UnbindBackward0"] == 1 and eager["mutate_output"][0] == "raised"
    assert compiled["fallbacks"] == []
    assert len(_epilogues(compiled)) == 1


@pytest.mark.slow
def test_ddp_buckets_and_fsdp2_with_inductor(tmp_path: Path) -> None:
    """The same comparisons with the default inner backend (inductor: gcc compiles on both ranks)."""
    for rank, result in enumerate(run_ranks(tmp_path, "inductor", ["dtensor_shard0", "ddp_buckets", "fsdp2"])):
        for name in ("ddp_buckets", "fsdp2"):
            _assert_training_matches(result[name]["eager"], result[name]["compiled"], rtol=1e-4)
            assert len(_epilogues(result[name]["compiled"])) == 1, (rank, name)
        _assert_dtensor_matches(result["dtensor_shard0"])
