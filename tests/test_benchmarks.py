"""Smoke tests of the performance harness (compare/benchmarks.py) and of the runtime's sliced returns.

Tiny sizes and no timing assertions: the figures themselves come from ``python -m predispatch_views compare``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest
import torch

from predispatch_views import compile_function
from predispatch_views.compare import benchmarks, compile_time, workloads
from predispatch_views.compare.benchmarks import Settings, autograd_nodes, held_bytes, run_benchmarks
from predispatch_views.compare.scaling import fit_exponent, plot_scaling
from predispatch_views.compare.strategies import all_strategies

CPU = torch.device("cpu")
TINY = Settings(device=CPU, inners=("aot_eager",), quick=True, min_run_time=0.001, rounds=2, step_cap_s=60.0)


def _tiny_workloads() -> list[workloads.Workload]:
    return [workloads.seed(6, width=4), *workloads.tiny_workloads()[1:]]


@pytest.fixture(scope="module")
def rows() -> list[benchmarks.Row]:
    torch._dynamo.reset()
    return run_benchmarks(TINY, _tiny_workloads(), progress=lambda line: None)


def test_a_row_for_every_workload_and_strategy(rows: list[benchmarks.Row]) -> None:
    labels = [s.label for s in all_strategies(TINY.inners)]
    for w in _tiny_workloads():
        got = [r for r in rows if r.workload == w.name and r.n_outputs == w.n_outputs]
        assert [r.strategy for r in got] == labels
        for r in got:
            assert not r.skipped, r.skipped
            assert r.step_us > 0 and r.fwd_us > 0 and r.compile_s > 0 and r.held_bytes > 0
            assert r.nodes
        assert {r.step_vs_eager for r in got if r.strategy == "eager"} == {1.0}
        assert {r.step_vs_stock for r in got if r.strategy == "stock[aot_eager]"} == {1.0}


def test_seed_backward_node_counts(rows: list[benchmarks.Row]) -> None:
    seed = {r.strategy: r.nodes for r in rows if r.workload == "seed"}
    assert seed["eager"]["UnbindBackward0"] == 1
    assert seed["prototype[aot_eager]"]["UnbindBackward0"] == 1  # eager's graph: one node for all outputs
    assert seed["stock_no_fix[aot_eager]"]["UnbindBackward0"] == 6  # one regenerated unbind per output
    assert seed["legacy_as_strided[aot_eager]"]["AsStridedBackward0"] == 6
    assert seed["slice_regen[aot_eager]"]["SelectBackward0"] == 6  # one select per output (#194037)
    assert seed["slice_regen[aot_eager]"]["UnbindBackward0"] == 0
    assert seed["stock[aot_eager]"]["UnbindBackward0"] == 0  # the unsafe fix: outputs are not views


def test_memory_measure_counts_outputs_and_saved_tensors() -> None:
    x = torch.randn(4, 8, requires_grad=True)
    outs = x.sin().unbind(0)  # views of one 128-byte base; sin saved x (128 bytes)
    assert held_bytes(outs) == 2 * 4 * 8 * 4
    assert held_bytes(x.detach().unbind(0)) == 4 * 8 * 4
    assert autograd_nodes(outs) == {"UnbindBackward0": 1, "SinBackward0": 1, "AccumulateGrad": 1}


def test_fit_recovers_a_known_exponent() -> None:
    ns = [10, 50, 200, 1000, 5000]
    noise = [1.03, 0.98, 1.01, 0.97, 1.02]
    assert fit_exponent(ns, [3e-6 * n**1.7 * e for n, e in zip(ns, noise)]) == pytest.approx(1.7, abs=0.03)
    assert fit_exponent(ns, [5.0] * len(ns)) == pytest.approx(0.0)
    assert math.isnan(fit_exponent([10], [1.0]))


def test_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = plot_scaling({"a": [(10, 1.0), (100, 10.0)], "b": [(10, 1.0), (100, 100.0)]}, tmp_path / "s.png", "t")
    assert path is not None and path.stat().st_size > 0


def test_perf_section_writes_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(benchmarks, "all_workloads", lambda quick, slow: [workloads.seed(n, width=4) for n in (4, 12)])
    monkeypatch.setattr(benchmarks, "EPILOGUE_SIZES", (4, 12))
    monkeypatch.setattr(benchmarks, "_warm_up", lambda settings: None)  # the rows fixture covers it
    monkeypatch.setattr(benchmarks, "COMPILE_QUICK", ("single_view",))
    args = argparse.Namespace(quick=True, inners=("aot_eager", "inductor"), device="cpu", slow=False, compile_rounds=2)
    text = benchmarks.run_perf_section(args, tmp_path)
    assert (tmp_path / "perf.md").read_text() == text
    assert "| seed | 12 | prototype[aot_eager] |" in text  # --quick: aot_eager only
    assert "[inductor]" not in text and "`inductor`" not in text
    assert "### Targets" in text and "k = " in text
    # The compile-time measure: its table (2 rounds of single_view) and its targets.
    assert "### Compile time (CPU, interleaved rounds)" in text and "| single_view | " in text
    assert "prototype[aot_eager]: compile vs stock, worst workload" in text
    assert len((tmp_path / "perf.csv").read_text().splitlines()) == 1 + 2 * len(all_strategies(("aot_eager",)))


def test_cuda_is_refused_clearly_without_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is present")
    with pytest.raises(SystemExit, match="CUDA is not available"):
        benchmarks.settings_from_args(argparse.Namespace(device="cuda", quick=True, inners=("aot_eager",)))


# --- runtime: a long run of a multi-output call's results is returned as one slice -------------------------


def _check_like_eager(fn, x: torch.Tensor) -> str:  # type: ignore[no-untyped-def]
    compiled = compile_function(fn)
    outs, ref = compiled(x), fn(x)
    flat, flat_ref = torch.utils._pytree.tree_leaves(outs), torch.utils._pytree.tree_leaves(ref)
    assert len(flat) == len(flat_ref)
    for a, b in zip(flat, flat_ref):
        assert torch.equal(a, b)
        assert type(a.grad_fn) is type(b.grad_fn)
        assert (a._base is None) == (b._base is None)
    torch.stack([o.sum() for o in flat]).sum().backward()
    (entry,) = compiled.cache.values()
    return entry.program.epilogue_source


def test_long_runs_are_sliced_short_ones_named() -> None:
    x = torch.randn(12, 3, requires_grad=True)
    source = _check_like_eager(lambda t: t.mul(2).unbind(0), x)
    assert "return (*v1[0:12], )" in source and "v1[0]" not in source
    source = _check_like_eager(lambda t: t.mul(2).unbind(0)[:3], torch.randn(12, 3, requires_grad=True))
    assert "v2 = v1[0]" in source and "*v1" not in source


def test_sliced_returns_with_repeats_gaps_and_two_sources() -> None:
    def repeated(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        o = t.mul(2).unbind(0)
        return (*o, o[3])  # o[3] twice: it keeps its name, the run is split around it

    def two_sources(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = t.mul(2).unbind(0), t.sin().split(1, 0)
        return (*a[:9], *b, *a[9:], a[2].view(-1))

    source = _check_like_eager(repeated, torch.randn(12, 3, requires_grad=True))
    assert "*v1[4:12]" in source
    source = _check_like_eager(two_sources, torch.randn(12, 3, requires_grad=True))
    assert "*v2[0:9]" not in source  # a[2] is also viewed: that run is not a slice
    assert "[0:12]" in source  # b is


def test_compile_time_rows_ratios_and_targets() -> None:
    """The compile-time measure's arithmetic: per-round ratios, their median, the two targets per inner."""
    row = compile_time.CompileRow("deep_mlp", "aot_eager", {"stock": [1.0, 2.0, 1.0], "prototype": [0.9, 2.2, 1.0]})
    other = compile_time.CompileRow("seed", "aot_eager", {"stock": [1.0, 1.0, 1.0], "prototype": [1.2, 1.1, 1.0]})
    assert row.ratios("prototype") == pytest.approx([0.9, 1.1, 1.0])
    assert row.ratio() == pytest.approx(1.0)
    found = {name: (measured, limit) for name, measured, limit, _ in compile_time.targets([row, other])}
    deep = next(k for k in found if "deep_mlp" in k)
    worst = next(k for k in found if "worst workload" in k)
    assert found[deep] == (pytest.approx(1.0), 1.0)
    assert found[worst] == (pytest.approx(1.1), 1.05)  # seed's median ratio
    table = compile_time.markdown([row, other])
    assert "| deep_mlp | 1.000 (1.000-2.000) | 1.000 (0.900-2.200) | **1.00** (0.90-1.10) |" in table


def test_compile_time_measures_each_contender_each_round() -> None:
    rows = compile_time.measure("aot_eager", ["single_view"], 2, compile_time.contenders("aot_eager", True))
    (row,) = rows
    assert set(row.seconds) == {"stock", "prototype", "prototype_capture"}
    assert all(len(times) == 2 and all(0 < t < 60 for t in times) for times in row.seconds.values())


@pytest.mark.parametrize(
    ("script", "arguments", "results_file"),
    [
        ("seed_measurement.py", ["--sizes", "4", "--runs", "1", "--rounds", "4:2"], "seed-measurement.md"),
        ("segment_cost.py", ["--writes", "0,1", "--rounds", "1", "--calls", "2", "--size", "8"], "segment-cost.md"),
        ("core_parts_cost.py", ["--inner", "aot_eager", "--heads", "2", "--rounds", "1"], "core-parts-cost.md"),
        ("models_step_time.py", ["--inner", "aot_eager", "--rounds", "1", "--models", "vit_block_unbind"],
         "models-step-time.md"),
        ("saved_alias_cost.py", ["--inner", "aot_eager", "--models", "vit_block_unbind", "--rounds", "1",
                                 "--number", "2"], "saved-alias-cost.md"),
        ("seed_ratios.py", ["--sizes", "4", "--runs", "1", "--rounds", "1", "--min-run-time", "0.001"],
         "seed-ratios.md"),
        ("partial_use_cost.py", ["--inner", "aot_eager", "--runs", "1", "--rounds", "1", "--rows", "8",
                                 "--min-run-time", "0.001"], "partial-use-cost.md"),
    ],
)
def test_the_scripts_the_design_quotes_write_their_results_file(
    tmp_path: Path, script: str, arguments: list[str], results_file: str
) -> None:
    """design/01 and design/05 quote these scripts' results files whole (doc_figures table blocks): a tiny run writes
    a file with the provenance line and the same tables, under the same headings, as the committed one."""
    import subprocess
    import sys

    from predispatch_views import doc_figures

    root = Path(__file__).resolve().parent.parent
    output = tmp_path / results_file
    done = subprocess.run(
        [sys.executable, str(root / "scripts" / script), *arguments, "--output", str(output)],
        capture_output=True, text=True, timeout=600, cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    written, committed = output.read_text(), (root / "results" / results_file).read_text()
    assert written.splitlines()[2].startswith("_Written by `python scripts/" + script)
    shapes = [[(heading, header) for heading, header, _, _ in doc_figures._tables(t)] for t in (written, committed)]
    assert shapes[0] == shapes[1]
    assert all(rows for _, _, rows, _ in doc_figures._tables(written))
