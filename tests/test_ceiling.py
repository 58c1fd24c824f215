"""The gap to the ceiling (issue 22, compare/ceiling.py): its arithmetic, and how the fuzzer and the parity report
count it. Planted strategies only (no compile): the figures are checked against what was planted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from predispatch_views.compare import fuzz_runner
from predispatch_views.compare.case_types import Case, tensors
from predispatch_views.compare.ceiling import (
    Result,
    ceiling_label_for,
    gap_markdown,
    gaps,
    stock_label_for,
)
from predispatch_views.compare.fuzz import (
    COMPILED_AUTOGRAD,
    DYNAMIC,
    FuzzStrategy,
    fuzz,
    fuzz_gaps,
    markdown,
    run_program,
    setting_of,
    strategy_set,
    summary,
)
from predispatch_views.compare.fuzz_program import generate
from predispatch_views.compare.parity_results import CaseRun, Divergence, ParityResults
from predispatch_views.compare.probes import PROBES, Raised
from predispatch_views.compare.report import markdown as parity_markdown
from predispatch_views.compare.report import parity_gaps, text_table
from predispatch_views.compare.strategies import CEILING, dynamo_eager, eager, prototype, prototype_fn, stock

MATCH = Result("match", None, ())


def _diverges(probe: str = "alias", *fallbacks: str) -> Result:
    return Result("divergence", probe, fallbacks)


LABELS = [
    "eager",
    "dynamo_eager[eager]",
    "dynamo_eager[eager,dynamic]",
    "stock[aot_eager]",
    "prototype[aot_eager]",
    "prototype_fn[aot_eager]",
    "stock[aot_eager,dynamic]",
    "prototype[aot_eager,dynamic]",
]


def test_each_entry_point_is_compared_with_its_stock_and_the_ceiling_under_its_setting() -> None:
    assert stock_label_for("prototype_fn[aot_eager]", LABELS) == "stock[aot_eager]"
    assert stock_label_for("prototype[aot_eager,dynamic]", LABELS) == "stock[aot_eager,dynamic]"
    assert ceiling_label_for("prototype[aot_eager]", LABELS) == "dynamo_eager[eager]"
    assert ceiling_label_for("prototype[aot_eager,dynamic]", LABELS) == "dynamo_eager[eager,dynamic]"
    assert ceiling_label_for("prototype[aot_eager,compiled_autograd]", LABELS) is None


def test_gap_closed_and_the_reasons_behind_it() -> None:
    records = [
        # stock wrong, the ceiling right: the backend closes it, compile_function falls back and stays wrong.
        {"dynamo_eager[eager]": MATCH, "stock[aot_eager]": _diverges(), "prototype[aot_eager]": MATCH,
         "prototype_fn[aot_eager]": _diverges("alias", "a custom Function")},
        # the same, the backend below the ceiling without a fallback (a later call's probe counts as the first's).
        {"dynamo_eager[eager]": MATCH, "stock[aot_eager]": _diverges(),
         "prototype[aot_eager]": _diverges("grad_fn@call2"),
         "prototype_fn[aot_eager]": Result("match", None, ("a custom Function",))},
        # every strategy right, or the ceiling wrong too: no gap to close.
        {"dynamo_eager[eager]": MATCH, "stock[aot_eager]": MATCH, "prototype[aot_eager]": MATCH,
         "prototype_fn[aot_eager]": MATCH},
        {"dynamo_eager[eager]": _diverges(), "stock[aot_eager]": _diverges(), "prototype[aot_eager]": _diverges(),
         "prototype_fn[aot_eager]": _diverges()},
        # the dynamic setting ran here only; the backend without its stock is not counted.
        {"dynamo_eager[eager,dynamic]": MATCH, "stock[aot_eager,dynamic]": _diverges(),
         "prototype[aot_eager,dynamic]": MATCH, "prototype[aot_eager]": MATCH},
    ]  # fmt: skip
    found = {g.label: g for g in gaps(records, LABELS)}
    assert set(found) == {"prototype[aot_eager]", "prototype_fn[aot_eager]", "prototype[aot_eager,dynamic]"}
    backend, function, dynamic = (
        found["prototype[aot_eager]"],
        found["prototype_fn[aot_eager]"],
        found["prototype[aot_eager,dynamic]"],
    )
    assert (backend.programs, backend.stock, backend.ceiling, backend.matched) == (4, 1, 3, 2)
    assert backend.closed == 0.5 and backend.below_the_ceiling == 1 and backend.fallbacks == 0
    assert backend.reasons == {"no fallback: divergence in grad_fn": 1}
    assert (function.matched, function.closed, function.fallbacks, function.below_the_ceiling) == (2, 0.5, 2, 1)
    assert function.reasons == {"a custom Function": 1}
    assert (dynamic.programs, dynamic.closed) == (1, 1.0)
    assert (
        gaps([{"dynamo_eager[eager]": MATCH, "stock[aot_eager]": MATCH, "prototype[aot_eager]": MATCH}], LABELS)[
            0
        ].closed
        is None
    )  # the ceiling no better than stock: nothing to close
    text = "\n".join(gap_markdown(list(found.values()), "programs"))
    assert "| backend | prototype[aot_eager] | 4 | 1 | 3 | 2 | 50% | 0 (0%) | 2 | 1 |" in text
    assert "| compile_function | prototype_fn[aot_eager] | 4 | 1 | 3 | 2 | 50% | 2 (50%) | 1 | 1 |" in text
    assert "- 1 x a custom Function" in text


def test_the_fuzzer_runs_the_ceiling_under_each_setting_of_its_stock() -> None:
    labels = [s.label for s in strategy_set(("aot_eager", "inductor"), frozenset({DYNAMIC, COMPILED_AUTOGRAD}))]
    assert labels[:4] == [
        "eager",
        "dynamo_eager[eager]",
        "dynamo_eager[eager,dynamic]",
        "dynamo_eager[eager,compiled_autograd]",
    ]
    assert sum(label.startswith(CEILING) for label in labels) == 3
    for label in labels:
        if label.startswith("stock"):
            assert ceiling_label_for(label, labels) is not None, label
    classic = strategy_set(("aot_eager",))
    assert [s.label for s in classic][:2] == ["eager", "dynamo_eager[eager]"]
    assert not any(setting_of(s) for s in classic)


def _fake(name: str, wrap: Callable[[Callable[..., Any], Any], Any], inner: str = "fake") -> FuzzStrategy:
    return FuzzStrategy(name, inner, lambda fn: lambda *args: wrap(fn, args))


def _runs(fn: Callable[..., Any], args: Any) -> Any:
    return fn(*args)


def _extra_draw(fn: Callable[..., Any], args: Any) -> Any:
    out = fn(*args)
    torch.rand(1)
    return out


def _grad_off_after(fn: Callable[..., Any], args: Any) -> Any:
    out = fn(*args)
    torch.set_grad_enabled(False)
    return out


def test_the_fuzzer_counts_below_the_ceiling_and_keeps_judging_against_stock() -> None:
    """The ceiling right, stock and the backend wrong on other probes, compile_function right: the backend is below
    the ceiling (diagnostics), not wrong where stock matches (stock does not); compile_function closes the gap."""
    seed = 7
    index = next(
        i
        for i in range(40)
        if not isinstance(run_program(generate(seed, i), eager(), ("forward",)).observations["forward"], Raised)
    )
    strategies = [
        eager(),
        _fake(CEILING, _runs, "eager"),
        _fake("stock", _grad_off_after),
        _fake("prototype", _extra_draw),
        _fake("prototype_fn", _runs),
    ]
    results = fuzz(1, seed, strategies, start=index, do_shrink=False)
    table = summary(results)
    assert table["prototype[fake]"]["below_the_ceiling"] == 1
    assert table["prototype[fake]"]["wrong_where_stock_matches"] == 0
    assert table["prototype_fn[fake]"]["below_the_ceiling"] == 0
    assert table["dynamo_eager[eager]"]["match"] == 1
    found = {g.label: g for g in fuzz_gaps(results)}
    assert (found["prototype[fake]"].closed, found["prototype_fn[fake]"].closed) == (0.0, 1.0)
    assert found["prototype[fake]"].reasons == {"no fallback: divergence in after_call": 1}
    assert "### Gap to the ceiling" in markdown(results)
    # The multi-process runner's rows give the same figures.
    row = fuzz_runner._row(results.programs[0][0].name, seed, index, results)
    assert row["eager_forward_runs"] is True
    assert row["strategies"]["prototype[fake]"]["below_ceiling"] is True
    assert fuzz_runner.summary([row], results.labels)["prototype[fake]"]["below_the_ceiling"] == 1
    runner_gaps = {
        g.label: (g.programs, g.stock, g.ceiling, g.matched) for g in fuzz_runner.row_gaps([row], results.labels)
    }
    assert runner_gaps == {label: (g.programs, g.stock, g.ceiling, g.matched) for label, g in found.items()}
    # A program whose eager forward raises is left out of the gap.
    row["eager_forward_runs"] = False
    assert all(g.programs == 0 for g in fuzz_runner.row_gaps([row], results.labels))


def _case(name: str) -> Case:
    return Case(name, lambda x: x.unbind(0), tensors())


def test_the_parity_report_shows_the_gap_over_cases_whose_eager_forward_runs() -> None:
    cases = [_case("ok"), _case("gap"), _case("eager_raises")]
    strategies = [eager(), dynamo_eager(), stock("aot_eager"), prototype("aot_eager"), prototype_fn("aot_eager")]
    wrong = Divergence("[0]", "a view", "not a view")
    runs: dict[tuple[str, str], CaseRun] = {}
    for c in cases:
        forward = Raised("RuntimeError", "eager's error") if c.name == "eager_raises" else torch.ones(1)
        for s in strategies:
            diverges = (s.name == "stock" and c.name != "ok") or (s.name == "prototype_fn" and c.name == "gap")
            fallbacks = [("f (x.py:1)", "a custom Function")] if s.name == "prototype_fn" and c.name == "gap" else []
            observations = {probe: 0 for probe in PROBES} | {"forward": forward, "alias": int(diverges)}
            divergences = {probe: None for probe in PROBES} | {"alias": wrong if diverges else None}
            runs[c.name, s.label] = CaseRun(c, s, observations, fallbacks=fallbacks, divergences=divergences)
    results = ParityResults(cases, strategies, runs, 0.0)
    found = {g.label: g for g in parity_gaps(results)}
    backend, function = found["prototype[aot_eager]"], found["prototype_fn[aot_eager]"]
    assert (backend.programs, backend.stock, backend.ceiling, backend.matched, backend.closed) == (2, 1, 2, 2, 1.0)
    assert (function.matched, function.closed, function.below_the_ceiling) == (1, 0.0, 1)
    assert function.reasons == {"a custom Function": 1}
    assert "| compile_function | prototype_fn[aot_eager] | 2 | 1 | 2 | 1 | 0% | 1 (50%) | 1 | 1 |" in parity_markdown(
        results
    )
    assert "Gap to the ceiling" in text_table(results)


def test_reasons_behind_the_gap_count_by_kind_of_the_fallback_list() -> None:
    """Two messages of one kind of fallback (each naming its own nodes) are one reason; an unknown one stays as is."""
    from predispatch_views.fallbacks import FALLBACK_REASONS

    kind = FALLBACK_REASONS[0]
    below = [
        Result("divergence", "alias", (f"op_1 {kind.marker} (a)",)),
        Result("divergence", "alias", (f"op_2 {kind.marker} (b)", "something new")),
    ]
    records = [
        {"dynamo_eager[eager]": MATCH, "stock[aot_eager]": _diverges(), "prototype[aot_eager]": r} for r in below
    ]
    (gap,) = gaps(records, ["eager", "dynamo_eager[eager]", "stock[aot_eager]", "prototype[aot_eager]"])
    assert gap.reasons == {kind.summary: 2, "something new": 1}
