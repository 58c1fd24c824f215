"""Stress (``--runslow``): 10,000 outputs, a 200-long view chain, 100 recompiles, on the prototype.

The workloads live in predispatch_views/compare/stress.py, which ``compare --slow`` also runs. Each must finish
and match eager; the times are printed (``-s``), never asserted on. The harness itself is checked at toy sizes
without ``--runslow``.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pytest
import torch

from predispatch_views.compare import stress


def _report(result: stress.StressResult) -> None:
    print(
        f"\n{result.workload} {result.strategy}: compile {result.compile_s:.2f} s, call {result.call_s * 1e3:.2f} ms, "
        f"backward {result.backward_s * 1e3:.2f} ms, graphs {result.compiles} {result.note}"
    )


@pytest.mark.slow
def test_ten_thousand_outputs() -> None:
    result = stress.run_many_outputs("prototype", "aot_eager", 10_000)
    _report(result)
    assert result.matches_eager
    assert result.compiles == 1


@pytest.mark.slow
def test_ten_thousand_outputs_share_one_unbind_node() -> None:
    compiled = torch.compile(stress.many_outputs_program, backend=stress.make_backend("prototype", "aot_eager"))
    outs = compiled(torch.randn(10_000, 2, requires_grad=True))
    assert len(outs) == 10_000
    assert len({id(o.grad_fn) for o in outs}) == 1
    assert type(outs[0].grad_fn).__name__ == "UnbindBackward0"
    assert all(o._base is outs[0]._base for o in outs)


@pytest.mark.slow
def test_view_chain_of_200() -> None:
    result = stress.run_view_chain("prototype", "aot_eager", 200)
    _report(result)
    assert result.matches_eager
    assert result.note.startswith("view nodes under an output: 201 ")


@pytest.mark.slow
def test_one_hundred_recompiles() -> None:
    result = stress.run_recompiles("prototype", "aot_eager", 100)
    _report(result)
    assert result.matches_eager
    assert result.compiles == 100


@pytest.mark.parametrize("strategy", ["prototype", "stock"])
def test_harness_at_toy_sizes(strategy: str) -> None:
    results = stress.run_all((strategy,), "aot_eager", scale=0.02, echo=lambda line: None)
    assert [r.workload for r in results] == ["200_outputs", "view_chain_4", "2_recompiles"]
    assert all(r.matches_eager for r in results)
    assert [r.compiles for r in results] == [1, 1, 2]
    if strategy == "prototype":
        assert results[1].note == "view nodes under an output: 5 (eager 5)"
    else:  # stock hides the chain behind CompiledFunctionBackward
        assert results[1].note == "view nodes under an output: 0 (eager 5)"


def test_stress_section_writes_its_table_and_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stress, "WORKLOADS", {name: (run, 3) for name, (run, _) in stress.WORKLOADS.items()})
    table = stress.run_stress_section(argparse.Namespace(quick=False, device="cpu"), tmp_path)
    lines = table.splitlines()
    assert lines[0] == "## Stress"
    rows = [line for line in lines if line.startswith("| 3_") or line.startswith("| view_chain_")]
    assert len(rows) == 6  # three workloads, prototype and stock
    assert all("| yes |" in row for row in rows)
    with (tmp_path / "stress.csv").open() as f:
        records = list(csv.DictReader(f))
    assert [(r["workload"], r["strategy"]) for r in records][:2] == [
        ("3_outputs", "prototype[aot_eager]"),
        ("3_outputs", "stock[aot_eager]"),
    ]
