"""The OpInfo oracle (predispatch_views/compare/opinfo.py) on a fast seeded subset, and its classifier on planted
defects.

The subset: a dozen ops of torch's op_db, the multi-output views first, each with the program kind that exercises
it (a view of an intermediate, the intermediate written after the views were taken, an in-place variant on an
intermediate / on a multi-output view / on an input, out= into a fresh buffer / into an input), one or two seeded
samples each, then the ops where the full run found defects; every setting (static and dynamic=True, grad mode on
and off) and both entry points (the backend and compile_function). A prototype-only defect (the prototype wrong or
crashing where stock matches eager) fails; a defect still open is a strict xfail naming its repro. The full run is
``python -m predispatch_views compare --opinfo``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from predispatch_views.compare import opinfo
from predispatch_views.compare.fuzz import CRASH_WHERE_STOCK_RUNS, WRONG_WHERE_STOCK_MATCHES
from predispatch_views.compare.opinfo import PROTOTYPE, STOCK, OpProgram, Row, Setting
from predispatch_views.compare.strategies import Strategy

SEED = 0

# op name -> the program kind it runs (PROGRAM_KINDS), and how many of its samples: two for the multi-output views,
# one for the others (each program is ten compiled runs, about 1.3 s of CPU).
SUBSET: dict[str, tuple[str, int]] = {
    "unbind": ("intermediate", 2),
    "split": ("write_base_after", 2),
    "split_with_sizes": ("intermediate", 2),
    "chunk": ("direct", 2),
    "tensor_split": ("intermediate", 2),
    "hsplit": ("write_base_after", 2),
    "unflatten": ("intermediate", 1),
    "narrow": ("write_base_after", 1),
    "add": ("inplace_intermediate", 1),  # dynamic=True with an in-place op (issue 21, class 1)
    "sin": ("inplace_view", 1),  # eager refuses the write into a multi-output view under grad mode
    "mul": ("inplace_input", 1),
    "cos": ("out_input", 1),  # a single-tensor out= (issue 21, class 3)
    "sort": ("out_input", 1),  # out= with a tuple of buffers
    # Found by the full run (fixed in 2faf7b2): compile_function crashed on a sparse input.
    "sparse.sampled_addmm": ("out_input", 1),
    # Found by the full run (fixed since): OpInfo's wrapper_set_seed seeds inside freeze_rng_state.
    "log_normal": ("direct", 1),
    "bernoulli": ("out_input", 1),
}

# Defects still open, each a strict xfail naming its repro (none at present).
OPEN_DEFECTS: dict[str, str] = {}


def _params() -> list[Any]:
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=OPEN_DEFECTS[name]))
        if name in OPEN_DEFECTS
        else name
        for name in SUBSET
    ]


@pytest.fixture(scope="module")
def subset() -> dict[str, list[OpProgram]]:
    selected = opinfo.select_ops(",".join(SUBSET), SEED, 2, exact=True)
    programs: dict[str, list[OpProgram]] = {}
    for op, samples in selected:
        kind, count = SUBSET[op.name]
        programs[op.name] = [p for p in opinfo.programs_for(op, samples) if p.kind == kind][:count]
    return programs


def _defects(rows: list[Row]) -> list[str]:
    # The first two lines of what the entry point got: Dynamo's wrapper, then the error it wraps.
    return [
        f"{r.op} s{r.sample} {r.program} {r.setting} {r.strategy}: {r.rule}: {r.probe}"
        + " | ".join(r.got.splitlines()[:2])
        for r in rows
        if r.defect
    ]


@pytest.mark.parametrize("name", _params())
def test_no_prototype_only_defect(subset: dict[str, list[OpProgram]], name: str) -> None:
    kind, count = SUBSET[name]
    programs = subset[name]
    assert len(programs) == count, f"{name}: expected {count} {kind} programs, got {len(programs)}"
    for program in programs:
        rows = opinfo.run_op_program(program)
        # Every setting ran every entry point: 3 static, 2 dynamic (compile_function has no dynamic mode), x 2.
        assert len(rows) == 10
        assert not _defects(rows), "\n".join(_defects(rows))


# ---------------------------------------------------------------------------------------------------------
# The classifier finds planted defects: a strategy like stock that returns non-views, or swallows eager's error.
# ---------------------------------------------------------------------------------------------------------


def _planted(change: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Callable[[str, str, Setting], Strategy]:
    """Stock for stock; for the backend, stock's compiled function with ``change`` applied."""

    def make(name: str, inner: str, setting: Setting) -> Strategy:
        real = opinfo.entry_strategy(STOCK if name == PROTOTYPE else name, inner, setting)
        if name != PROTOTYPE:
            return real
        return Strategy(PROTOTYPE, inner, lambda fn: change(real.make(fn)))

    return make


def _returns_copies(compiled: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        return pytree.tree_map_only(torch.Tensor, lambda t: t.clone(), compiled(*args))

    return run


def _swallows_errors(compiled: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        try:
            return compiled(*args)
        except Exception:
            return None

    return run


STATIC_GRAD = (Setting(False, True),)


def test_planted_non_view_is_a_defect() -> None:
    (op, samples), *_ = opinfo.select_ops("narrow", SEED, 1, exact=True)
    (program,) = [p for p in opinfo.programs_for(op, samples) if p.kind == "direct"]
    honest = opinfo.run_op_program(program, settings=STATIC_GRAD, make_strategy=_planted(lambda f: f))
    assert {r.strategy: r.category for r in honest} == {STOCK: "match", PROTOTYPE: "match", "prototype_fn": "match"}
    rows = opinfo.run_op_program(program, settings=STATIC_GRAD, make_strategy=_planted(_returns_copies))
    planted = next(r for r in rows if r.strategy == PROTOTYPE)
    assert (planted.kind, planted.probe, planted.rule) == ("divergence", "alias", WRONG_WHERE_STOCK_MATCHES)
    assert planted.got.startswith("[0].is_view: False")
    assert planted.confirmed
    assert [r.strategy for r in rows if r.defect] == [PROTOTYPE]


def test_planted_missing_error_is_a_defect() -> None:
    from torch.testing._internal.opinfo.core import SampleInput

    (selected, _), *_ = opinfo.select_ops("linalg.cholesky", SEED, 1, exact=True)
    # Not positive-definite: eager raises at run time, where stock's compiled kernel raises the same error.
    sample = opinfo.make_sample(0, SampleInput(-torch.eye(3).requires_grad_()))
    program = OpProgram(selected.name, sample, "direct", opinfo.build_function(selected.op, sample, "direct"))
    rows = opinfo.run_op_program(program, settings=STATIC_GRAD, make_strategy=_planted(_swallows_errors))
    by_strategy = {r.strategy: r for r in rows}
    assert by_strategy[STOCK].category == "match"
    planted = by_strategy[PROTOTYPE]
    # The forward returns where eager raised; the classifier reports the later probe where the planted strategy
    # raises another exception than eager's (a crash), and the rule holds it against stock's match.
    assert planted.kind in ("divergence", "crash") and planted.rule == WRONG_WHERE_STOCK_MATCHES
    assert planted.eager.startswith("raises torch._C._LinAlgError: linalg.cholesky")
    assert planted.confirmed


def _crashes(compiled: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        raise TypeError("'Node' object is not iterable")

    return run


# narrow: stock matches eager, so the crash breaks the first rule; unbind of an intermediate: stock's outputs are
# no views (the unsafe fix), so only the crash rule holds the prototype.
@pytest.mark.parametrize(
    ("name", "kind", "rule"),
    [("narrow", "direct", WRONG_WHERE_STOCK_MATCHES), ("unbind", "intermediate", CRASH_WHERE_STOCK_RUNS)],
)
def test_planted_crash_is_a_defect(name: str, kind: str, rule: str) -> None:
    (op, samples), *_ = opinfo.select_ops(name, SEED, 1, exact=True)
    program = next(p for p in opinfo.programs_for(op, samples) if p.kind == kind)
    rows = opinfo.run_op_program(program, settings=STATIC_GRAD, make_strategy=_planted(_crashes))
    planted = next(r for r in rows if r.strategy == PROTOTYPE)
    assert (planted.kind, planted.rule) == ("crash", rule)
    assert "TypeError: 'Node' object is not iterable" in planted.got
    assert planted.confirmed


def test_report_lists_defects(tmp_path: Any) -> None:
    row = Row(
        "unbind",
        0,
        "intermediate",
        "dynamic/grad",
        PROTOTYPE,
        "crash",
        "crash",
        "forward",
        CRASH_WHERE_STOCK_RUNS,
        ".: raises AttributeError: boom",
        "{...}",
        [],
        "input=Tensor[3, 4]",
        True,
    )
    ok = Row("unbind", 0, "intermediate", "dynamic/grad", STOCK, "match", "match", "", "", "", "", [])
    text = opinfo.markdown([row, ok], [("unbind", {"view", "multi_output_view"})], 1.0, SEED, 1)
    assert "### Prototype-only defects: 1 runs" in text
    assert "#### unbind" in text and "AttributeError: boom" in text
    assert "| prototype dynamic/grad | 0 | 0 | 1 | 0 | 0 | 0 | 1 | 0 |" in text
    opinfo.write_csv([row, ok], tmp_path / "opinfo.csv")
    assert len((tmp_path / "opinfo.csv").read_text().splitlines()) == 3


_ABORTING_SITECUSTOMIZE = """
import os

if os.environ.get("OPINFO_TEST_ABORT"):
    from predispatch_views.compare import fuzz

    real_run_program = fuzz.run_program

    def run_program(program, strategy, *args, **kwargs):
        if strategy.name == "prototype" and program.name == os.environ["OPINFO_TEST_ABORT"]:
            os.abort()  # torch crashing the interpreter, planted
        return real_run_program(program, strategy, *args, **kwargs)

    fuzz.run_program = run_program
"""


@pytest.mark.slow
def test_a_worker_that_dies_is_attributed_to_the_strategy(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """--jobs: the backend aborts the process on one program; its rows say crash (the process died) for the
    backend only, the defect is counted, and the worker goes on with the next programs."""
    import os

    (tmp_path / "sitecustomize.py").write_text(_ABORTING_SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OPINFO_TEST_ABORT", "narrow/s0/direct")
    rows = opinfo.run_in_workers(["narrow"], opinfo.WorkerArgs("aot_eager", SEED, 1), 1, tmp_path / "work")
    died = [r for r in rows if r.program == "direct"]
    assert len(died) == 10
    for r in died:
        if r.strategy == PROTOTYPE:
            assert (r.category, r.probe, r.rule) == ("crash", "process", WRONG_WHERE_STOCK_MATCHES), r
            assert "the process died" in r.got
        else:
            assert r.category in ("match", "fallback") and not r.rule, r
    assert {r.program for r in rows} == {"direct", "intermediate", "write_base_after"}
    assert not [r for r in rows if r.program != "direct" and r.defect]
