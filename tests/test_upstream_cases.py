"""The cases ported from PyTorch's test_aotdispatch.py: well-formed, bounded in CI, and the prototype is never
worse than stock on them.

The fast ones also run in tests/test_parity.py (prototype == eager, or == stock where it falls back); the whole
set runs under --runslow here and in ``python -m predispatch_views compare --cases upstream_``.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest

from predispatch_views.compare import parity
from predispatch_views.compare.cases import CASES, by_name
from predispatch_views.compare.cases_upstream import PREFIX, SOURCE
from predispatch_views.compare.probes import PROBES, describe, first_difference
from predispatch_views.compare.strategies import eager, prototype, prototype_fn, stock

UPSTREAM = [c for c in CASES if c.name.startswith(PREFIX)]

# Cases where the prototype diverges from eager on a probe where stock matches eager, still open, per entry
# point. Each entry must keep failing (strict xfail): once the engine is fixed, remove it.
KNOWN_WORSE_THAN_STOCK: dict[str, dict[str, str]] = {"backend": {}, "compile_function": {}}
ENTRY_POINTS = {
    "backend": prototype("aot_eager"),
    "compile_function": prototype_fn("aot_eager"),
}


def test_every_case_names_its_upstream_test() -> None:
    assert len(UPSTREAM) >= 100
    for c in UPSTREAM:
        assert re.fullmatch(re.escape(SOURCE) + r"test_\w+", c.note), c.name
    assert len({c.note for c in UPSTREAM}) >= 80  # distinct upstream tests, not one program many times


def test_fast_subset_is_bounded() -> None:
    fast = [c.name for c in UPSTREAM if c.fast]
    assert 10 <= len(fast) <= 16


def test_quick_runs_only_the_fast_upstream_cases() -> None:
    args = argparse.Namespace(quick=True, inners=("aot_eager",), cases=PREFIX, slow=False)
    cases, _, _ = parity.plan(args)
    assert cases and all(c.fast for c in cases)
    args.quick = False
    assert len(parity.plan(args)[0]) == len(UPSTREAM)


def _worse_than_stock(name: str, entry: str) -> list[str]:
    """Probes on which the prototype differs from eager while stock matches eager; after a fallback of the
    backend, probes on which it differs from stock (compile_function falls back to AOTAutograd without Dynamo,
    which need not raise Dynamo's errors)."""
    case = by_name(name)
    reference = parity.run_case(case, eager())
    stock_run = parity.run_case(case, stock("aot_eager"))
    run = parity.run_case(case, ENTRY_POINTS[entry])
    problems = []
    for probe in PROBES:
        if run.fallbacks and entry == "backend":
            diff = first_difference(stock_run.observations[probe], run.observations[probe])
        elif first_difference(reference.observations[probe], stock_run.observations[probe]) is None:
            diff = first_difference(reference.observations[probe], run.observations[probe])
        else:
            continue
        if diff is not None:
            path, expected, actual = diff
            problems.append(f"{probe} at {path}: expected {describe(expected)}, got {describe(actual)}")
    return problems


def _params() -> list[Any]:
    out = []
    for entry, known in KNOWN_WORSE_THAN_STOCK.items():
        for c in UPSTREAM:
            marks = [pytest.mark.xfail(strict=True, reason=known[c.name])] if c.name in known else []
            out.append(pytest.param(entry, c.name, marks=marks, id=f"{entry}-{c.name}"))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("entry", "name"), _params())
def test_prototype_never_worse_than_stock(entry: str, name: str) -> None:
    problems = _worse_than_stock(name, entry)
    assert not problems, f"{name} ({by_name(name).note}) under {entry}:\n  " + "\n  ".join(problems)


def test_known_divergences_name_existing_cases() -> None:
    names = {c.name for c in UPSTREAM}
    for known in KNOWN_WORSE_THAN_STOCK.values():
        assert set(known) <= names
