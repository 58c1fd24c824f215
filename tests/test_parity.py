"""The parity suite on its fast subset: the prototype must behave as eager wherever it does not fall back.

Every expectation is eager's (or, for a fallback, stock's) behaviour measured in the same test; nothing here
hard-codes what a program should do.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pytest
import torch

from predispatch_views.compare import parity
from predispatch_views.compare.cases import CASES, by_name, select_cases
from predispatch_views.compare.cases_upstream import PREFIX as UPSTREAM_PREFIX
from predispatch_views.compare.probes import PROBES, SEED, Raised, describe, first_difference
from predispatch_views.compare.strategies import eager, parity_strategies, prototype, stock

FAST = [c.name for c in select_cases(fast_only=True)]


def _explain(label: str, run: parity.CaseRun) -> str:
    lines = [f"{run.case.name}: {label} diverges from eager"]
    for probe, d in run.divergences.items():
        if d is not None:
            lines.append(f"  {probe} at {d.path}\n    eager: {describe(d.expected)}\n    got:   {describe(d.actual)}")
    return "\n".join(lines)


@pytest.mark.parametrize("name", FAST)
def test_prototype_matches_eager_on_fast_cases(name: str) -> None:
    case = by_name(name)
    reference = parity.run_case(case, eager())
    run = parity.run_case(case, prototype("aot_eager"))
    if run.fallbacks:
        # A fallback hands the program to stock AOTAutograd: it must then behave exactly as stock does.
        stock_run = parity.run_case(case, stock("aot_eager"))
        for probe in PROBES:
            diff = first_difference(stock_run.observations[probe], run.observations[probe])
            assert diff is None, f"{name} fell back ({run.fallbacks}) but differs from stock on {probe}: {diff}"
        return
    parity.compare(reference, run)
    assert run.matched == len(PROBES), _explain("prototype[aot_eager]", run)


def test_harness_detects_a_divergence() -> None:
    """Stock's unsafe fix lets the seed program's outputs be mutated in place; eager raises."""
    case = by_name("unbind_dim0")
    reference = parity.run_case(case, eager())
    run = parity.run_case(case, stock("aot_eager"))
    parity.compare(reference, run)
    assert isinstance(reference.observations["mutate_output"]["mutate"], Raised)
    assert run.divergences["mutate_output"] is not None
    assert run.divergences["mutate_output"].path == ".mutate"
    parity.compare(reference, reference)
    assert reference.matched == len(PROBES)


def test_library_covers_the_space() -> None:
    own = [c.name for c in CASES if not c.name.startswith(UPSTREAM_PREFIX)]
    assert len(own) >= 60
    assert len({c.name for c in CASES}) == len(CASES)
    assert 10 <= len([n for n in FAST if n in own]) <= 20  # the ported upstream cases: tests/test_upstream_cases.py
    assert any(c.slow for c in CASES)


@pytest.mark.parametrize("name", [c.name for c in CASES if not c.slow])
def test_inputs_are_fresh_and_seeded(name: str) -> None:
    case = by_name(name)
    a = case.inputs(torch.Generator().manual_seed(SEED), "cpu")
    b = case.inputs(torch.Generator().manual_seed(SEED), "cpu")
    for x, y in zip(a.args, b.args, strict=True):
        assert x is not y or not isinstance(x, torch.Tensor)  # None and ints are shared
        assert first_difference(x, y) is None


def test_first_difference() -> None:
    x = torch.arange(4.0)
    assert first_difference({"a": [x, 1]}, {"a": [x + 1e-7, 1]}) is None
    assert first_difference({"a": [x, 1]}, {"a": [x + 1, 1]})[0] == ".a[0]"
    assert first_difference({"a": [x, 1]}, {"a": [x, 2]})[0] == ".a[1]"
    assert first_difference(Raised("RuntimeError", "m"), Raised("RuntimeError", "m")) is None
    assert first_difference(Raised("RuntimeError", "m"), Raised("RuntimeError", "n")) is not None
    assert first_difference(Raised("RuntimeError", "m"), x) is not None
    assert first_difference((x,), [x]) is not None
    assert first_difference(x, x.to(torch.float64)) is not None


def test_worker_processes_give_the_same_results() -> None:
    cases = [by_name("unbind_dim0"), by_name("mutate_intermediate_after")]
    strategies = [eager(), stock("aot_eager"), prototype("aot_eager")]
    serial = parity.run_parity(cases, strategies, jobs=1)
    spawned = parity.run_parity(cases, strategies, jobs=2)
    for key, run in serial.runs.items():
        other = spawned.runs[key]
        assert run.divergences.keys() == other.divergences.keys()
        assert [d is None for d in run.divergences.values()] == [d is None for d in other.divergences.values()]
        assert run.nodes == other.nodes


def test_section_writes_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("PREDISPATCH_VIEWS_PARITY_JOBS", "1")
    args = argparse.Namespace(
        quick=True, inners=("aot_eager",), device="cpu", show_divergences=True, cases="unbind_dim0", slow=False,
        divergence_strategy="legacy", divergence_case="unbind",
    )
    markdown = parity.run_parity_section(args, tmp_path)
    printed = capsys.readouterr().out
    assert "prototype[aot_eager]" in printed and "Divergences" in printed
    # The listing keeps the strategies asked for; the tables still count every strategy.
    assert "unbind_dim0 / legacy_as_strided[aot_eager] /" in printed
    assert "unbind_dim0 / stock[aot_eager] /" not in printed
    assert (tmp_path / "parity.md").read_text() == markdown
    rows = list(csv.DictReader((tmp_path / "parity.csv").open()))
    assert len(rows) == len(parity_strategies(("aot_eager",))) * len(PROBES)  # one case x strategies x probes
    stock_mutation = next(r for r in rows if r["strategy"] == "stock" and r["probe"] == "mutate_output")
    assert stock_mutation["status"] == "diverge"
    assert "| stock[aot_eager] |" in markdown
    # slice_regen's errors name Select where eager's name Unbind: counted apart (compare/report.py).
    assert "match eager once view-node names are ignored" in markdown and "slice_regen[aot_eager] " in markdown


def test_mutation_probe_records_what_the_mutation_did() -> None:
    """Where eager allows the in-place, the probe sees it succeed and sees the doubled values."""
    run = parity.run_case(by_name("no_grad_input"), eager())
    forward = run.observations["forward"]["values"]["outputs"]
    mutated = run.observations["mutate_output"]
    assert mutated["mutate"] is None
    assert first_difference(forward[0] * 2, mutated["values"]["outputs"][0]) is None
    assert first_difference(forward[1], mutated["values"]["outputs"][1]) is None
    assert mutated["versions"]["outputs"] == [1, 1, 1]  # one base, one version counter
