"""The differential fuzzer (compare/fuzz.py): its generator, its probes, its shrinker, and a fixed-seed sample."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from predispatch_views.compare.fuzz import (
    CRASH_WHERE_STOCK_RUNS,
    WRONG_ON_A_PROBE,
    WRONG_WHERE_STOCK_MATCHES,
    Run,
    classify,
    failure_markdown,
    failure_predicate,
    fuzz,
    fuzz_strategies,
    run_program,
    violated_rule,
    wrong_on_a_probe,
)
from predispatch_views.compare.fuzz_program import Program, Stmt, generate, shrink
from predispatch_views.compare.probes import SEED, Raised, first_difference
from predispatch_views.compare.strategies import Strategy, eager

# The fixed-seed sample run by the default suite (about 1 s of CPU per program: four strategies, every probe).
SAMPLE_SEED = 20261202
SAMPLE_SIZE = 14


def _program(body: list[str], outputs: tuple[str, ...], uses: tuple[str, ...] = ("a",)) -> Program:
    stmts = []
    for line in body:
        target = line.split(" = ")[0] if " = " in line else ""
        stmts.append(Stmt(line, tuple(n.strip() for n in target.split(",") if n.strip()), uses))
    return Program(
        0,
        0,
        ("a",),
        (
            "a_base = torch.randn((3, 4), generator=gen).requires_grad_()",
            "a = a_base.mul(1)",
            "return (a,), (a_base,), ()",
        ),
        tuple(stmts),
        outputs,
    )


def _fake(name: str, wrap: Callable[[Callable[..., Any], Any], Any]) -> Strategy:
    """A strategy that runs the program eagerly and then applies ``wrap(fn, args)`` (a planted misbehaviour)."""
    return Strategy(name, "fake", lambda fn: lambda *args: wrap(fn, args))


def test_generator_is_deterministic_per_seed() -> None:
    first = [generate(3, i) for i in range(20)]
    again = [generate(3, i) for i in range(20)]
    other = [generate(4, i) for i in range(20)]
    assert [p.source() for p in first] == [p.source() for p in again]
    assert sum(a.source() != b.source() for a, b in zip(first, other)) >= 18


def test_generated_programs_are_valid_by_construction() -> None:
    """Most programs run in eager, and none fails for a wrong shape or dimension (the generator tracks them)."""
    ran = 0
    errors = []
    for i in range(150):
        case = generate(5, i).case()
        inputs = case.inputs(torch.Generator().manual_seed(SEED), "cpu")
        try:
            case.fn(*inputs.args)
            ran += 1
        except RuntimeError as e:  # autograd's in-place checks: valid programs whose expected result is the error
            errors.append(str(e))
    assert ran >= 120
    deliberate = "storage offset 71"  # the generator's rare out-of-bounds as_strided
    words = ("dimension", "Dimension", "shape", "size", "index")
    shape_errors = [e for e in errors if any(w in e for w in words) and deliberate not in e]
    assert not shape_errors


def test_printed_source_runs_like_the_program(tmp_path: Path) -> None:
    """The printed source, saved as a module the way a user pastes a repro, computes what the fuzzer ran."""
    for i in range(6):
        program = generate(6, i)
        path = tmp_path / f"repro_{i}.py"
        path.write_text(program.source())
        spec = importlib.util.spec_from_file_location(f"repro_{i}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
        finally:
            del sys.modules[spec.name]
        saved = _outputs_of(module.program, lambda gen, m=module: m.make_inputs(gen)[0])
        case = program.case()
        ran = _outputs_of(case.fn, lambda gen, c=case: c.inputs(gen, "cpu").args)
        assert first_difference(saved, ran) is None, program.source()


def _outputs_of(fn: Callable[..., Any], make: Callable[[torch.Generator], Any]) -> Any:
    torch.manual_seed(0)
    try:
        return [o.detach() if isinstance(o, torch.Tensor) else o for o in fn(*make(torch.Generator().manual_seed(0)))]
    except RuntimeError as e:
        return Raised.of(e)


@pytest.mark.parametrize("rule", [WRONG_WHERE_STOCK_MATCHES, CRASH_WHERE_STOCK_RUNS])
def test_shrinker_reduces_a_planted_failure_to_a_minimal_program(rule: str) -> None:
    """A fake strategy fails on every program containing ``zero_()``: the shrinker keeps that and little else.

    Under the crash rule, the control diverges from eager (after the call) without crashing.
    """
    marker = "zero_()"

    def planted(fn: Callable[..., Any], args: Any) -> Any:
        if marker in fn.fuzz_source:
            raise RuntimeError("planted failure")
        return fn(*args)

    fake = _fake("planted", planted)
    program = next(
        p for i in range(300) if marker in (p := generate(7, i)).source() and len(p.body) >= 6 and _eager_runs(p)
    )
    outcome = classify(run_program(program, eager()), run_program(program, fake))
    assert outcome.kind == "crash"
    control = eager() if rule == WRONG_WHERE_STOCK_MATCHES else _fake("diverging", _extra_draw)
    assert violated_rule(outcome, classify(run_program(program, eager()), run_program(program, control))) == rule
    fails = failure_predicate(eager(), fake, control, outcome, eager_raises=False, rule=rule)
    shrunk, tried = shrink(program, fails, max_tests=200)
    assert fails(shrunk)
    assert len(shrunk.body) < len(program.body) and len(shrunk.outputs) == 1
    # 1-minimal: deleting any remaining statement loses the failure (or leaves no program).
    for k in range(len(shrunk.body)):
        smaller = shrunk.without({k})
        assert smaller is None or not fails(smaller), (k, shrunk.source())
    assert tried < 200


def _eager_runs(program: Program) -> bool:
    return not isinstance(run_program(program, eager(), ("forward",)).observations["forward"], Raised)


def _grad_off_after(fn: Callable[..., Any], args: Any) -> Any:
    out = fn(*args)
    torch.set_grad_enabled(False)
    return out


def _extra_draw(fn: Callable[..., Any], args: Any) -> Any:
    out = fn(*args)
    torch.rand(1)
    return out


def _second_output_a_view(fn: Callable[..., Any], args: Any) -> Any:
    first, second = fn(*args)
    return first, second.view_as(second)


@pytest.mark.parametrize(
    ("wrap", "probe", "path"),
    [
        (_grad_off_after, "after_call", ".grad_enabled"),
        (_extra_draw, "after_call", ".next_random"),
        (_second_output_a_view, "sharing", ".same_object[0]"),
    ],
)
def test_fuzz_probes_see_planted_differences(wrap: Callable[..., Any], probe: str, path: str) -> None:
    program = _program(["t0 = a.mul(2.0)", "t1 = t0[0]"], ("t1", "t1"))
    reference = run_program(program, eager())
    run = run_program(program, _fake("planted", wrap))
    assert torch.is_grad_enabled()
    diff = first_difference(reference.observations[probe], run.observations[probe], "")
    assert diff is not None and diff[0].startswith(path), diff
    assert classify(reference, run).kind == "divergence"
    assert classify(reference, run_program(program, eager())).kind == "match"


def test_wrong_on_a_probe_finds_what_hides_behind_a_diverging_stock() -> None:
    program = _program(["t0 = a.mul(2.0)", "t1 = t0[0]"], ("t1", "t1"))
    reference = run_program(program, eager())
    prototype = run_program(program, _fake("prototype", _extra_draw))
    stock = run_program(program, _fake("stock", _second_output_a_view))
    assert classify(reference, stock).kind == "divergence"
    outcome = wrong_on_a_probe(reference, prototype, stock)
    assert outcome is not None and outcome.probe == "after_call"
    assert wrong_on_a_probe(reference, prototype, prototype) is None


def _last_output_a_view(fn: Callable[..., Any], args: Any) -> Any:
    *first, last = fn(*args)
    return (*first, last.view_as(last))


def test_the_process_runner_counts_the_diagnostic_rule() -> None:
    """A prototype wrong on another probe than the one where stock diverges: the multi-process runner's table once
    showed 0 in `wrong_on_a_probe` while listing such a program (then fuzz_s43_704) below it."""
    from predispatch_views.compare import fuzz_runner

    strategies = [eager(), _fake("stock", _last_output_a_view), _fake("prototype", _extra_draw)]
    results = fuzz(1, 43, strategies, start=704, do_shrink=False)
    row = fuzz_runner._row(results.programs[0][0].name, 43, 704, results)
    table = fuzz_runner.summary([row], results.labels)
    assert table["prototype[fake]"]["wrong_on_a_probe"] == 1, row
    assert table["stock[fake]"]["wrong_on_a_probe"] == 0


def test_a_crash_behind_a_divergence_in_the_same_probe_is_a_crash() -> None:
    """Found on s22_789: stock's backward_twice gave other first gradients and raised in its second backward; its
    crash hid behind the divergence, so the prototype's identical crash looked like one stock does not have."""
    reference = Run({"backward_twice": {"first": [torch.ones(2)], "second": [torch.ones(2)]}}, [], 0.0)
    error = Raised("RuntimeError", "Trying to backward through the graph a second time")
    both_wrong = Run({"backward_twice": {"first": [torch.zeros(2)], "second": error}}, [], 0.0)
    only_crash = Run({"backward_twice": {"first": [torch.ones(2)], "second": error}}, [], 0.0)
    outcome = classify(reference, both_wrong)
    assert (outcome.kind, outcome.path) == ("crash", ".second")
    assert violated_rule(classify(reference, only_crash), outcome) is None
    diverges = Run({"backward_twice": {"first": [torch.zeros(2)], "second": [torch.ones(2)]}}, [], 0.0)
    assert violated_rule(classify(reference, only_crash), classify(reference, diverges)) == CRASH_WHERE_STOCK_RUNS


def test_fixed_seed_sample_prototype_never_wrong_where_stock_matches() -> None:
    """Issue 9's invariant on a fixed sample: no program where a prototype strategy diverges or crashes from eager
    while stock matches eager."""
    results = fuzz(SAMPLE_SIZE, SAMPLE_SEED, fuzz_strategies("aot_eager"), do_shrink=False)
    assert len(results.programs) == SAMPLE_SIZE
    broken = [f for f in results.failures if f.rule != WRONG_ON_A_PROBE]
    report = "\n".join(line for f in broken for line in failure_markdown(f))
    assert not broken, report
