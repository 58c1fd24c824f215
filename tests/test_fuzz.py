"""The differential fuzzer (compare/fuzz.py): its generator, its probes, its shrinker, and a fixed-seed sample."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

import predispatch_views
from predispatch_views.compare.fuzz import (
    AS_STOCK_ONE_GRAPH,
    CRASH_AS_THE_CEILING,
    CRASH_WHERE_STOCK_RUNS,
    WRONG_AS_THE_CEILING,
    WRONG_ON_A_PROBE,
    WRONG_WHERE_STOCK_MATCHES,
    FuzzStrategy,
    Outcome,
    Run,
    ceiling_strategies,
    classify,
    fails_alike,
    failure_markdown,
    failure_predicate,
    fuzz,
    fuzz_strategies,
    program_features,
    run_program,
    setting_of,
    summary,
    violated_rule,
    wrong_on_a_probe,
)
from predispatch_views.compare.fuzz_program import (
    DIMENSIONS,
    Program,
    ReturnsInput,
    Stmt,
    _eager_outcomes,
    generate,
    parse_dimensions,
    shrink,
)
from predispatch_views.compare.probes import SEED, Raised, first_difference
from predispatch_views.compare.strategies import Strategy, eager, prototype_fn

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
    found = wrong_on_a_probe(reference, prototype, stock)
    assert found is not None and found[0].probe == "after_call" and not found[1]
    assert wrong_on_a_probe(reference, prototype, prototype) is None
    # The ceiling differing alike on that probe (fuzzer s1801_119: compiled autograd's assert on eager's CopySlices
    # in a second backward, shared by Dynamo with backend="eager") reports it apart; differing otherwise, not.
    assert wrong_on_a_probe(reference, prototype, stock, prototype) == (found[0], True)
    assert wrong_on_a_probe(reference, prototype, stock, reference) == (found[0], False)


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


def _raises(message: str) -> Callable[[Callable[..., Any], Any], Any]:
    def wrap(fn: Callable[..., Any], args: Any) -> Any:
        raise RuntimeError(message)

    return wrap


@pytest.mark.parametrize(
    ("ceiling_message", "rule"), [("same", CRASH_AS_THE_CEILING), ("other", CRASH_WHERE_STOCK_RUNS)]
)
def test_a_crash_the_ceiling_shares_is_reported_apart_from_the_invariant(ceiling_message: str, rule: str) -> None:
    """Fuzzer s905_15: the prototype raised where stock ran, and Dynamo with backend="eager" raised the same. Only the
    same error at the same probe moves a crash out of the invariant's count; another error keeps it in."""
    from predispatch_views.compare import fuzz_runner

    strategies = [
        eager(),
        _fake("dynamo_eager", _raises(ceiling_message)),
        _fake("stock", _last_output_a_view),
        _fake("prototype", _raises("same")),
    ]
    results = fuzz(1, 43, strategies, start=704, do_shrink=False)
    assert [f.rule for f in results.failures] == [rule]
    table = summary(results)["prototype[fake]"]
    expected = (0, 1) if rule == CRASH_AS_THE_CEILING else (1, 0)
    assert (table["crash_where_stock_runs"], table["crash_as_the_ceiling"]) == expected
    row = fuzz_runner._row(results.programs[0][0].name, 43, 704, results)
    assert row["strategies"]["prototype[fake]"]["rule"] == rule


def _plain_stock(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn  # a control that matches eager, as stock did on s802_73 thanks to its graph breaks


@pytest.mark.parametrize(
    ("subject", "rule"),
    [
        (prototype_fn("aot_eager"), AS_STOCK_ONE_GRAPH),
        (Strategy("prototype_fn", "aot_eager", lambda fn: lambda *args: _raises("planted")(fn, args)),
         WRONG_WHERE_STOCK_MATCHES),
    ],
)  # fmt: skip
def test_a_compile_function_failure_stock_aot_function_shares_is_reported_apart(subject: Strategy, rule: str) -> None:
    """Fuzzer s802_73: compile_function's one graph returns the input ``a`` and AOTAutograd's partitioner saves it,
    so the caller's write to it makes the backward raise; functorch's aot_function on the same function raises the
    same (AS_STOCK_ONE_GRAPH, apart from the invariant). A failure aot_function does not share stays in it."""
    from predispatch_views.compare import fuzz_runner

    strategies = [eager(), Strategy("stock", "aot_eager", _plain_stock), subject]
    results = fuzz(1, 802, strategies, start=73, do_shrink=False, dimensions=ALL)
    assert [f.rule for f in results.failures] == [rule]
    table = summary(results)["prototype_fn[aot_eager]"]
    one_graph = rule == AS_STOCK_ONE_GRAPH
    assert (table["as_stock_one_graph"], table["crash_where_stock_runs"] + table["wrong_where_stock_matches"]) == (
        int(one_graph),
        int(not one_graph),
    )
    row = fuzz_runner._row(results.programs[0][0].name, 802, 73, results)
    assert row["strategies"]["prototype_fn[aot_eager]"]["rule"] == rule


def _unchanged(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


@pytest.mark.parametrize(
    ("ceiling_diverges", "rule"), [(True, WRONG_AS_THE_CEILING), (False, WRONG_WHERE_STOCK_MATCHES)]
)
def test_a_divergence_the_ceiling_shares_is_reported_apart(ceiling_diverges: bool, rule: str) -> None:
    """Fuzzer s1102_942: under compiled autograd, a second backward through eager's own CopySlices node hits an
    internal assert where eager raises; Dynamo with backend="eager" diverges the same way, stock (no eager node)
    matches. Only the same divergence at the same probe moves it out of the invariant."""
    strategies = [
        eager(),
        _fake("dynamo_eager", _extra_draw) if ceiling_diverges else Strategy("dynamo_eager", "fake", _unchanged),
        Strategy("stock", "fake", _unchanged),
        _fake("prototype", _extra_draw),
    ]
    results = fuzz(1, 43, strategies, start=704, do_shrink=False)
    assert [f.rule for f in results.failures] == [rule]
    table = summary(results)["prototype[fake]"]
    assert (table["wrong_where_stock_matches"], table["wrong_as_the_ceiling"]) == (
        int(not ceiling_diverges),
        int(ceiling_diverges),
    )


def test_s1102_942_is_compiled_autograds_own_on_eagers_graph() -> None:
    """s1102_942's premise (WRONG_AS_THE_CEILING): the fuzz program run by eager itself, nothing compiled, with
    compiled autograd around its backward as the compiled_autograd setting has it, hits the same internal assert in
    the second backward where plain eager raises "backward through the graph a second time"."""
    import functools

    from predispatch_views.compare.fuzz import _compiled_autograd

    program = generate(1102, 942, ALL)
    assert program.settings == ("compiled_autograd",)
    under = FuzzStrategy(
        "eager_under_compiled_autograd", "eager", _unchanged, setting="compiled_autograd",
        context=functools.partial(_compiled_autograd, "eager"),
    )  # fmt: skip
    outcome = classify(run_program(program, eager()), run_program(program, under))
    assert (outcome.kind, outcome.probe, outcome.path) == ("divergence", "backward_twice", ".second")
    assert isinstance(outcome.actual, Raised) and "INTERNAL ASSERT FAILED" in outcome.actual.message
    expected = outcome.expected
    assert isinstance(expected, Raised) and "backward through the graph a second time" in expected.message


def test_failing_alike_ignores_which_output_of_a_compiled_function_an_error_names() -> None:
    def raised(message: str) -> Outcome:
        return Outcome("divergence", "mutate_each_output", ".output 1.backward", None, Raised("RuntimeError", message))

    def text(node: str) -> str:
        return f"one of the variables ... which is {node}, is at version 1; expected version 0 instead."

    compiled = raised(text("output 0 of CompiledFunction"))
    assert fails_alike(compiled, raised(text("output 1 of CompiledFunction")))  # s1102_949 vs aot_function
    assert not fails_alike(compiled, raised(text("output 0 of MulBackward0")))
    assert not fails_alike(compiled, Outcome("match"))


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


# ---------------------------------------------------------------------------------------------------------
# The new dimensions (Note [Fuzz dimensions]).
# ---------------------------------------------------------------------------------------------------------

ALL = parse_dimensions("all")
# sha256 of the sources of programs (44, 0..299) from the classic generator as it was before the new dimensions
# (commit d24944f): the documented seeds must keep reproducing.
CLASSIC_SEED_44_DIGEST = "4842c7ec6c7962378b986b50fb52c2a4f6bf571e154fc9be7c32ccab4b16fd33"


def test_classic_generator_is_unchanged() -> None:
    sources = [generate(44, i).source() for i in range(300)]
    assert hashlib.sha256("".join(sources).encode()).hexdigest() == CLASSIC_SEED_44_DIGEST
    assert [generate(44, i, parse_dimensions("classic")).source() for i in range(20)] == sources[:20]


def test_new_dimensions_keep_the_classic_statements() -> None:
    """The new statements are inserted between the classic ones, which stay as they were, in order."""
    for i in range(30):
        classic, extended = generate(8, i), generate(8, i, ALL)
        assert [s.code for s in extended.body if s.code in {c.code for c in classic.body}] == [
            s.code for s in classic.body
        ]
        assert extended.outputs[: len(classic.outputs)] == classic.outputs
        assert extended.name == f"fuzz_s8_{i}_all"


def test_parse_dimensions() -> None:
    assert parse_dimensions("all") == frozenset(DIMENSIONS)
    assert parse_dimensions("classic") == frozenset()
    assert parse_dimensions("out, dynamic") == {"out", "dynamic"}
    with pytest.raises(ValueError, match="unknown"):
        parse_dimensions("out,bogus")


def test_generator_produces_every_new_dimension_within_60_programs() -> None:
    programs = [generate(9, i, ALL) for i in range(60)]
    seen: set[str] = set()
    for p in programs:
        seen.update(program_features(p))
        seen.update(f"setting {s}" for s in p.settings)
        seen.update(s.kind for s in p.body)
    expected = {
        "out=",
        "multi-output out=",
        "out= call into an input",
        "out= call into a value",
        "int input",
        "int varies (SymInt)",
        "list input",
        "None input",
        "other sizes",
        "called under no_grad",
        "called under inference_mode",
        "setting dynamic",
        "setting compiled_autograd",
    }
    assert expected <= seen, expected - seen


def test_new_dimension_programs_are_valid_by_construction() -> None:
    """Most programs run in eager (forward and backward); one called with other sizes runs on each call."""
    ran = 0
    for i in range(80):
        program = generate(10, i, ALL)
        outcomes = _eager_outcomes(program)
        assert len(outcomes) == len(program.call_params)
        assert len(outcomes) == 1 or set(outcomes) == {"ran"}, (outcomes, program.source())
        ran += outcomes[0] == "ran"
    assert ran >= 45


# A tiny program with every new program dimension: an int k (varying: a SymInt), a list input, a None input, out=
# into an intermediate and into an input, a multi-output out=, three calls with other sizes.
TINY = Program(
    0,
    0,
    ("a", "b", "k", "xs", "opt"),
    (
        "a_base = torch.randn((n, 3), generator=gen).requires_grad_()",
        "a = a_base.mul(1)",
        "b = torch.randn((n, 3), generator=gen)",
        "xs = [torch.randn((3,), generator=gen).requires_grad_(), torch.randn((3,), generator=gen)]",
        "opt = None",
        "return (a, b, k, xs, opt,), (a_base, xs[0],), ()",
    ),
    (
        Stmt("t0 = a.mul(k) + xs[0]", ("t0",), ("a", "k", "xs")),
        Stmt("t1 = t0.add(1.0) if opt is None else t0.add(opt)", ("t1",), ("t0", "opt")),
        Stmt("u0 = torch.empty_like(t1)\nwith torch.no_grad():\n    torch.sin(t1, out=u0)", ("u0",), ("t1",)),
        Stmt("torch.mul(u0, 2.0, out=b)", (), ("u0", "b")),
        Stmt(
            "v, i = torch.empty(0), torch.empty(0, dtype=torch.long)\nwith torch.no_grad():\n"
            "    torch.max(t1, 1, out=(v, i))",
            ("v", "i"),
            ("t1",),
        ),
        Stmt("t2 = t1[:k]", ("t2",), ("t1", "k")),
        Stmt("t3, t4 = t1.split_with_sizes([1, 2], 1)", ("t3", "t4"), ("t1",)),
    ),
    ("t2", "t3", "t4", "u0", "v", "i"),
    params=(("n", 3), ("k", 2)),
    calls=((5, 3), (4, 1)),
)


TINY_PROBES = [
    f"{name}{call}"
    for call in ("", "@call2", "@call3")
    for name in ("forward", "alias", "grad_fn", "backward", "mutate_output", "after_call")
]


@pytest.mark.parametrize(
    ("setting", "call_mode"),
    [("", ""), ("", "no_grad"), ("", "inference_mode"), ("dynamic", ""), ("compiled_autograd", "")],
)
def test_each_strategy_setting_runs_a_tiny_program_and_matches_eager(setting: str, call_mode: str) -> None:
    """Stock and the backend under each setting, every probe on each of the three calls, compared with eager: the
    prototype matches eager."""
    program = replace(TINY, call_mode=call_mode, settings=(setting,) if setting else ())
    strategies = [s for s in fuzz_strategies("aot_eager", ALL) if setting_of(s) == setting and s.name != "eager"]
    assert {s.label for s in strategies} >= {f"stock[aot_eager{',' + setting if setting else ''}]"}
    reference = run_program(program, eager(), TINY_PROBES)
    assert list(reference.observations) == TINY_PROBES
    assert not isinstance(reference.observations["forward@call3"], Raised)
    outcomes = {s.label: classify(reference, run_program(program, s, TINY_PROBES)) for s in strategies}
    # Stock regenerates t2 (a slice by a SymInt) with as_strided on the later calls: AsStridedBackward0.
    for label, outcome in outcomes.items():
        if label.startswith("prototype"):
            assert outcome.kind == "match", (label, outcome.describe())


def _draws_again_on_other_sizes() -> Callable[[Callable[..., Any], Any], Any]:
    """A planted difference only a later call with other sizes (or another k) reaches: an extra random draw."""
    first: list[str] = []

    def wrap(fn: Callable[..., Any], args: Any) -> Any:
        out = fn(*args)
        signature = repr([tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in pytree.tree_leaves(args)])
        if first and first[0] != signature:
            torch.rand(1)
        first[:] = first or [signature]
        return out

    return wrap


def _fake_setting(name: str, setting: str, make_wrap: Callable[[], Callable[..., Any]]) -> FuzzStrategy:
    """A fake strategy under a setting; ``make_wrap()`` gives each compiled function its own planted wrapper."""

    def make(fn: Callable[..., Any]) -> Callable[..., Any]:
        wrap = make_wrap()
        return lambda *args: wrap(fn, args)

    return FuzzStrategy(name, "fake", make, setting=setting)


def _runs(fn: Callable[..., Any], args: Any) -> Any:
    return fn(*args)


def test_a_planted_difference_under_dynamic_is_classified_against_stock_of_the_same_setting() -> None:
    """The prototype under ``dynamic`` differs from eager on the second call only; stock under ``dynamic`` is right,
    stock under the default setting is wrong everywhere: the rule must compare with the former."""
    strategies = [
        eager(),
        _fake_setting("stock", "", lambda: _extra_draw),
        _fake_setting("prototype", "", lambda: _runs),
        _fake_setting("stock", "dynamic", lambda: _runs),
        _fake_setting("prototype", "dynamic", _draws_again_on_other_sizes),
    ]
    dims = parse_dimensions("sizes,dynamic")
    index = next(i for i in range(40) if (p := generate(11, i, dims)).calls and _eager_runs(p))
    results = fuzz(1, 11, strategies, start=index, do_shrink=False, dimensions=dims)
    ((program, row),) = results.programs
    assert program.settings == ("dynamic",) and len(program.call_params) == 3
    assert row["prototype[fake]"].outcome.kind == "match"
    wrong = row["prototype[fake,dynamic]"].outcome
    assert (wrong.kind, wrong.probe) == ("divergence", "after_call@call2"), wrong.describe()
    assert [(f.label, f.rule) for f in results.failures] == [("prototype[fake,dynamic]", WRONG_WHERE_STOCK_MATCHES)]
    from predispatch_views.compare import fuzz_runner

    table = fuzz_runner.summary([fuzz_runner._row(program.name, 11, index, results)], results.labels)
    assert table["prototype[fake,dynamic]"]["wrong_where_stock_matches"] == 1
    assert table["stock[fake,dynamic]"]["programs"] == 1


def test_shrinking_keeps_a_later_call_failure_and_drops_what_it_does_not_need() -> None:
    dims = parse_dimensions("sizes,grad_mode")
    program = next(
        p
        for i in range(80)
        if (p := generate(12, i, dims)).calls and p.call_mode and len(p.body) >= 4 and _eager_runs(p)
    )
    planted = _fake_setting("prototype", "", _draws_again_on_other_sizes)
    reference = run_program(program, eager())
    outcome = classify(reference, run_program(program, planted))
    assert outcome.probe == "after_call@call2", outcome.describe()
    fails = failure_predicate(eager(), planted, eager(), outcome, eager_raises=False)
    shrunk, _ = shrink(program, fails, max_tests=80)
    assert fails(shrunk)
    assert len(shrunk.calls) == 1 and shrunk.call_mode == ""  # the third call and the grad mode were not needed


def test_the_process_runner_resumes_after_the_programs_a_killed_run_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk whose programs are all in its rows (or died) starts no worker; one with some left starts after them."""
    import json

    from predispatch_views.compare import fuzz_runner

    started: list[list[str]] = []
    monkeypatch.setattr(fuzz_runner.subprocess, "run", lambda command, **_: started.append(command))
    (tmp_path / "rows_5_0.jsonl").write_text("".join(json.dumps({"index": i}) + "\n" for i in (0, 1, 3)))
    (tmp_path / "died_5_0.jsonl").write_text(json.dumps({"index": 2}) + "\n")
    rows = fuzz_runner._run_chunk("aot_eager", "all", ["eager"], 5, 0, 4, tmp_path)
    assert [r["index"] for r in rows] == [0, 1, 2, 3] and not started
    (tmp_path / "rows_5_4.jsonl").write_text(json.dumps({"index": 4}) + "\n")

    class WorkerWroteNothing(Exception):
        pass

    def attribute(*args: Any) -> Any:  # the fake worker writes no row, so the runner would attribute a crash
        raise WorkerWroteNothing

    monkeypatch.setattr(fuzz_runner, "_attribute_crash", attribute)
    with pytest.raises(WorkerWroteNothing):
        fuzz_runner._run_chunk("aot_eager", "all", ["eager"], 5, 4, 3, tmp_path)
    assert len(started) == 1 and started[0][started[0].index("--start") + 1] == "5"


@pytest.mark.xfail(
    strict=True, reason="open: s1202_698, torch 2.13's compiled autograd asserts on a released CopySlices"
)
def test_s1202_698_under_compiled_autograd() -> None:
    """Open (seeds 1201-1203 on aae181e): under compiled autograd, a second backward (no retain_graph) through
    ``t3 = b.sum(1)`` hits torch's internal assert ``(bool)fn`` (autograd/functions/tensor.cpp) where eager raises
    "backward through the graph a second time". The cause is torch's: compiled autograd collects every node
    reachable before running any, and a ``CopySlices`` whose first backward released its function asserts there;
    eager under compiled autograd asserts the same way on ``y = x * 2; v = y.view(9); v.add_(1); v.sum()``
    backwarded twice. The prototype reaches one because the graph after the graph break has no view output and
    goes whole to the inner backend, as stock's does: ``t3`` and ``t2 = t1 @ t1.t()`` share one compiled node,
    and ``t1``'s history holds the ``CopySlices`` of the replayed ``t1.add_`` (eager's own, where stock compiles
    the write away). Eager's ``t3`` does not reach it. A fix would cut graphs without view outputs into
    independent parts too (Note [Independent parts of the core]), a change to every such graph."""
    _assert_no_violation(1202, 698, "prototype[aot_eager,compiled_autograd]", "stock[aot_eager,compiled_autograd]")


@pytest.mark.parametrize("label", ["prototype[aot_eager]", "prototype_fn[aot_eager]"])
def test_s1203_834_a_function_reading_a_restricted_view_is_not_cut_around(label: str) -> None:
    """s1203_834 (compile_function on aae181e; the backend too once it ran such Functions in eager): ``t3`` is an
    eval dropout of a ``split`` output (eager: that output itself, which refuses in-place writes), and
    ``ReturnsInput.apply(t3)`` ran in eager between segments on the tensor the segment before handed over, which
    the caller could write; the Function's view of it then raised on its grad_fn where stock runs. A call that
    reads a restricted view is not cut around: the program falls back."""
    _assert_no_violation(1203, 834, label, "stock[aot_eager]")


@pytest.mark.parametrize("label", ["prototype[aot_eager]", "prototype_fn[aot_eager]"])
def test_s1311_858_a_base_whose_input_is_written_is_not_recomputed(label: str) -> None:
    """s1311_858 (compile_function on dd9db3e): ``t0 = a.clone()`` then ``a.add_(1.0)``, ``t0.diagonal()`` replayed.
    The recompute tag of Note [Bases the compiled backward must not save] made the backward recompute the clone
    from ``a``, which the function writes: the partitioner saved the input, and its write made the compiled
    backward raise where eager runs. A base whose ancestors are written is not tagged."""
    _assert_no_violation(1311, 858, label, "stock[aot_eager]")


@pytest.mark.parametrize(
    ("seed", "index", "setting"),
    [
        (1312, 67, "aot_eager"),
        (1312, 48, "aot_eager"),
        (1312, 567, "aot_eager"),
        (1311, 747, "aot_eager,compiled_autograd"),
        (1402, 491, "aot_eager,dynamic"),
    ],
)
def test_finds_of_seeds_1311_1312(seed: int, index: int, setting: str) -> None:
    """Found by seeds 1311-1312 on dd9db3e (present on 9c49a28 too), each a strict xfail until fixed.

    s1312_48 and s1312_67: a training dropout with p=0 under a returned view; after the caller wrote an output, the
    compiled backward raised "modified by an inplace operation" where eager's runs. s1312_48: the dropout counted
    as a random draw, so its base was never tagged for recomputation (a p=0 dropout draws nothing). s1312_67 (torch
    2.13): a view of a dropout kept in the core was replayed on the core's fresh tensor, which the compiled
    backward saved (Note [An eval dropout of an input the core reads]).

    s1312_567 and s1311_747, second calls (symbolic sizes): the core was compiled whole whenever it took a size
    input, so a backward through one output gave an unrelated input zeros where eager's is None (s1312_567, with a
    base the epilogue only detaches, Note [A base the epilogue only detaches], whose readers inside the core
    kept it attached), and compiled autograd crashed where stock runs (s1311_747). Size inputs no longer keep the
    core whole (Note [Independent parts of the core]).

    s1402_491 (seed 1402 on d873754, a regression of that fix): a part that did not take the size inputs had its
    sizes recovered in the compiled backward from a saved tensor, a base the caller then wrote through a replayed
    view; the backward raised where eager's runs. Every part takes every size input now."""
    _assert_no_violation(seed, index, f"prototype[{setting}]", f"stock[{setting}]")


def test_s1402_547_an_out_call_overlapping_its_input_under_compile_function() -> None:
    """``torch.sin(t1, out=t0)`` with ``t1 = t0.t()``, a diagonal, under no_grad: eager computes in its iteration
    order, reading elements it already wrote; the functional graph read them all first. Dynamo breaks the graph at
    the non-contiguous ``out=``, so stock matched eager; the call now runs in eager (function_rules.py,
    ``function_rules._mark_overlapping_writes``)."""
    _assert_no_violation(1402, 547, "prototype_fn[aot_eager]", "stock[aot_eager]")


def test_s1501_1617_a_metadata_write_of_a_dropout_that_returns_its_input_under_compile_function() -> None:
    """``t0 = F.dropout(b, 0.0, True); t0.unsqueeze_(2)``: in eager ``t0`` is ``b`` itself, so ``b`` and every
    later use of it gain a dimension; the trace's dropout allocates, so its later sizes were a copy's, and the
    compiled segment after the eager ``unsqueeze_`` crashed in backward where stock runs. The function now runs in
    eager (function_rules.metadata_mutation_of_a_returned_input)."""
    _assert_no_violation(1501, 1617, "prototype_fn[aot_eager]", "stock[aot_eager]")


def test_s1502_2277_an_input_saved_for_a_recompute_then_written_through_an_alias() -> None:
    """``t0 = a.add(1.0); t1 = t0.sum(0); t1.sin_(); t2 = F.dropout(t0, 0.0, True); b.transpose_(0, 2)``,
    returning ``t2, t1``, where ``a`` and ``b`` are views of one base. The backward raised "modified by an inplace
    operation" on a (2, 4, 3) tensor where eager's and stock's run: the compiled backward saved the input ``a``
    (to recompute ``t0``, the replayed dropout's base, and the sum from it), and ``b.transpose_``, the graph break,
    bumped the version counter ``a`` shares with ``b``. A regression of d873754, where a p=0 dropout stopped
    counting as a random draw; Note [What a recomputation may save] fixes it."""
    _assert_no_violation(1502, 2277, "prototype[aot_eager]", "stock[aot_eager]")


def test_s1602_334_a_compiled_output_written_then_backward_names_its_node() -> None:
    """Open from bf3f40d, fixed by Note [Eager's version error] (runtime.py). ``t1 = b.as_strided(...).sigmoid()``
    returned; the caller's ``t1.mul_(2)`` then a backward: eager raises "... [torch.FloatTensor [4, 4, 1]], which is
    output 0 of Sigmoid, is at version 1", compile_function raised the same error without "which is output 0 of
    Sigmoid" (the saved output was the compiled function's, with no node of eager's to name). The runtime now
    raises eager's error from a pre-hook on the compiled node."""
    _assert_no_violation(1602, 334, "prototype_fn[aot_eager]", "stock[aot_eager]")


def test_s1602_1270_an_inlined_identity_rewritten_under_inference_mode() -> None:
    """Found by seed 1602 on 3970915, a regression of 6bcdb52. Called under inference_mode, ``t2 =
    ReturnsInput.apply(t1)`` (inlined: grad is off) was rewritten to ``t1.view_as(t1)``, which crosses the graph
    break at ``torch.max(..., out=(u2, u3))``; Dynamo fakeifies it for the graph after the break and reads its
    autograd state, which raised for an inference-mode view whose base the graph wrote ("A view was created in
    inference mode ..."), where stock, returning ``t1`` itself, runs. ``t1 = F.dropout(a, 0.0, True)`` is ``a``
    itself, which requires grad: eager's apply returns it detached, which the rewrite now chooses (s1821_612: the
    dropout's input decides, not its fake), so the view that raised is not made, and the graph replays without the
    fallback 1ac87d2 added for it."""
    _assert_matches_without_fallback(1602, 1270, "prototype[aot_eager]")


@pytest.mark.parametrize("index", [135, 191, 422, 630])
def test_s1830_an_inlined_functions_view_crosses_a_break_where_its_base_is_written(index: int) -> None:
    """Seed 1830 on 83a5591: programs called under no_grad or inference_mode where ``ReturnsInput.apply`` (inlined:
    grad is off) returns a view that crosses a graph break and whose base is written before the next graph fell
    back to stock (the rule s1602_1270 added). Dynamo's wrap reads the view's ``grad_fn``, which raises only where
    its base requires grad, and there eager's apply (and the rewrite) returns the input detached: they replay, and
    match eager where stock and the ceiling return the input itself (191, 422: ``alias[0].is_view``; 135, a dirty
    Function's result, ``alias[1].identity``)."""
    _assert_matches_without_fallback(1830, index, "prototype[aot_eager]")


def test_s1701_525_a_recomputation_tag_the_backward_never_needs() -> None:
    """Found by seed 1701 on f65412e (a crash where stock runs, ``compile_function``). ``t5 =
    ScaledClone.apply(a)`` is viewed by the epilogue (``t6 = t5[2:3]``) and tagged for recomputation (Note [Bases
    the compiled backward must not save]); a random draw elsewhere in the core (``t0.uniform_()``) sent AOTAutograd
    through the min-cut partitioner, which honours the tag even where the backward needs nothing of ``t5`` and
    saved the input ``a`` to recompute it. The caller's ``a.mul_(2)`` then made the compiled backward raise. A
    family is now tagged only where the compiled backward may read a value computed from it (Note [What a
    recomputation may save])."""
    _assert_no_violation(1701, 525, "prototype_fn[aot_eager]", "stock[aot_eager]")


def test_s1701_803_a_custom_functions_view_written_in_a_later_segment() -> None:
    """Found by seed 1701 on 9f19884 (a crash where stock runs, ``compile_function``). ``t3 =
    ReturnsInput.apply(t2)`` runs in eager between two segments (Note [Segments]), and the later compiled segment
    writes ``t3`` under no_grad while reading it with grad: eager's ``t3`` is a view made in a custom Function
    (IN_CUSTOM_FUNCTION), whose ``grad_fn`` raises once it is written, and the compiled segment's autograd.Function
    read it after the write (a write through ``t3.detach()`` is hidden and stays accepted: test_segments). A
    compiled segment's write under no_grad to such a handed value is now refused (segments.py), and
    the function runs eagerly."""
    _assert_no_violation(1701, 803, "prototype_fn[aot_eager]", "stock[aot_eager]")


@pytest.mark.parametrize("label", ["prototype[aot_eager]", "prototype_fn[aot_eager]"])
def test_s1701_2920_a_later_segment_writes_a_handed_value_its_backward_reads(label: str) -> None:
    """Found by seed 1701 on 9f19884 (a crash where stock runs, both entry points), a consequence of e17ed8a's
    non-leaf examples. ``t4 = MarkDirty.apply(b.clone())`` runs in eager between two segments; the later compiled
    segment's ``t4.sin_()`` was compiled for a non-leaf ``t4`` requiring grad: AOTAutograd saved the input for
    ``sin``'s backward and then applied the write to it, so the backward found the saved input one version on. A
    compiled segment's write to a handed value requiring grad, by an op whose backward reads a value, is refused
    now (segments.py); the cut falls back."""
    stock = "stock[aot_eager]"
    _assert_no_violation(1701, 2920, label, stock)


def test_s1701_2557_an_inlined_functions_view_under_inference_mode() -> None:
    """Found by seed 1701 on 9f19884, present on f65412e, fixed in this session (a crash where stock runs, the
    backend). Called under inference_mode: ``t0 = ReturnsInput.apply(b)`` (inlined, rewritten: Note [An inlined
    Function returns its input as eager does]), ``a.sin_()`` on ``b``'s base, then ``MarkDirty.apply(t0)`` breaks
    the graph. The graph falls back (the rewritten view crosses the break) to stock's graph without the rewrite,
    which returns the input ``b`` itself; AOTAutograd regenerated that output as a new alias of ``b`` on each call,
    an inference-mode view where stock's Dynamo, never making it an output, hands on ``b`` itself. After
    ``MarkDirty`` wrote it, Dynamo's trace of the code after the break read its ``grad_fn`` and raised "A view was
    created in inference mode and its base ... modified inplace". The fallback now returns the input object itself
    (inner_backend._inputs_as_they_are)."""
    _assert_no_violation(1701, 2557, "prototype[aot_eager]", "stock[aot_eager]")


@pytest.mark.parametrize(
    ("index", "label"),
    [
        (3, "prototype_fn[aot_eager]"),
        (7, "prototype_fn[aot_eager]"),
        (84, "prototype_fn[aot_eager]"),
        (144, "prototype[aot_eager]"),
    ],
)
def test_s1801_calls_under_no_grad_or_inference_mode_compile_without_falling_back(index: int, label: str) -> None:
    """Seed 1801 on 77674e1, fallbacks that gave up nothing. Called under inference_mode (3: ``exp(t0, out=a)``
    then ``t1.mul_(2.0)`` on a view of ``ScaledClone.apply(a)``), no compiled op is recorded by autograd, so none
    may save a value a later write breaks (GraphMeta.recorded; the rules asked ``requires_grad``, which an input
    requiring grad keeps under no_grad). Called under no_grad (7, 84: ``MarkDirty.apply(t1)`` between two segments
    after a multi-output view of its storage), the restricted views handed over have no ``grad_fn`` to read where no
    value of their storage requires grad (segments._refused). Called under inference_mode (144: ``t4 =
    ReturnsInput.apply(t1)``, inlined and rewritten to eager's view, crosses the break at ``torch.max(t3, 1,
    out=(u4, u5))``), Dynamo's read of the view's ``grad_fn`` raises only where its base was written: by the graph
    or by the break's instruction, which writes only ``u4, u5`` (capture._written_at_break)."""
    _assert_matches_without_fallback(1801, index, label)


@pytest.mark.parametrize("index", [479, 560, 381, 269, 324])
def test_s1814_what_runs_between_two_graphs_writes(index: int) -> None:
    """Seed 1814 on 44dd7eb, fallbacks that gave up nothing (Note [What runs between two graphs]). 479 and 324:
    the graph breaks at an in-place view op of another input (``b.unsqueeze_(1)``), which bumps only that input's
    version, and the no_grad view (or inlined Function's view) crossing the break is of another base. 560: the
    graph writes the base (``a.copy_(t0)``) before its no_grad views are taken, which then record the version they
    see. 381: the same for a multi-output view, where stock diverges. 269: ``t5 = t3.detach()`` of ``t3 =
    t2.add(1)`` was taken for a view of the inlined Function's result (the walk back followed ``add``), and its
    write for a write of that result's base."""
    program = generate(1814, index, ALL)
    by_label = {s.label: s for s in fuzz_strategies("aot_eager", ALL)}
    reference = run_program(program, eager())
    run = run_program(program, by_label["prototype[aot_eager]"])
    assert run.fallbacks == []
    assert classify(reference, run).kind == "match", classify(reference, run).describe()


@pytest.mark.parametrize(
    ("label", "stock_label"),
    [
        ("prototype[aot_eager]", "stock[aot_eager]"),
        ("prototype[aot_eager,compiled_autograd]", "stock[aot_eager,compiled_autograd]"),
        ("prototype_fn[aot_eager]", "stock[aot_eager]"),
    ],
)
def test_s1816_616_a_function_applied_to_a_dropout_that_returns_its_input(label: str, stock_label: str) -> None:
    """Fuzz seed 1816 on db35ab4: ``t2 = F.dropout(t1, 0.0, True)`` returns ``t1`` (an expand of the input) in
    eager, a fresh tensor where torch 2.13 compiles it (Note [An eval dropout of an input the core reads]), and
    ``t4 = ReturnsInput.apply(t2)``, cut around and run in eager, returned a view of that fresh tensor. A write
    under no_grad to ``t4`` then succeeded (eager's raises: its elements share memory) and ``t4.grad_fn`` raised
    the Function view's error, where stock, whose ``t4`` is no view, runs. A call run in eager on such a dropout's
    result is no longer cut around (segments.cut): the backend falls back to stock, compile_function to eager."""
    _assert_no_violation(1816, 616, label, stock_label)


@pytest.mark.parametrize(
    ("index", "label", "stock_label"),
    [
        (358, "prototype[aot_eager]", "stock[aot_eager]"),
        (478, "prototype[aot_eager]", "stock[aot_eager]"),
        (478, "prototype[aot_eager,compiled_autograd]", "stock[aot_eager,compiled_autograd]"),
    ],
)
def test_s1817_a_functions_returned_input_example_has_static_sizes(index: int, label: str, stock_label: str) -> None:
    """Fuzz seed 1817 on 70bbec5 (present since 914368a): a custom Function returns an input (``ReturnsInput.apply(b)``,
    ``b`` a view of the same base as another input) and the segment after the cut gets that input's example viewed
    with the traced geometry (graph_meta.as_input_alias), a real tensor Dynamo never saw. AOTAutograd fakified it
    with fresh symbols, a later ``chunk`` guarded on them, and Dynamo's guard building raised IndexError (a symbol
    without a source) on the first call, where eager and stock run. The example is registered with static sizes
    (``_torch_internals.fakified_with_static_sizes``)."""
    _assert_no_violation(1817, index, label, stock_label)


def test_s1801_134_a_segment_knows_what_the_graph_break_writes() -> None:
    """Seed 1801 on 77674e1: ``ReturnsInput.apply(a)`` is cut around, and the graph ends at ``torch.sort(t3, 0,
    out=(u0, u1))``, which writes only its out tensors. The segment after the call lost that record
    (``GraphBreaks.break_writes``: unknown), so its ``chunk`` outputs crossing the break fell back "if the code
    between the graphs wrote its base", and with them the whole graph. The segments now keep it, mapped onto their
    own inputs and outputs by storage."""
    program = generate(1801, 134, ALL)
    by_label = {s.label: s for s in fuzz_strategies("aot_eager", ALL)}
    reference = run_program(program, eager())
    run = run_program(program, by_label["prototype[aot_eager]"])
    stock = classify(reference, run_program(program, by_label["stock[aot_eager]"]))
    assert run.fallbacks == []
    assert violated_rule(classify(reference, run), stock) is None


@pytest.mark.parametrize("index", [21, 116, 127])
def test_s1802_a_views_lazy_error_stock_meets_at_compile_time_is_avoided(index: int) -> None:
    """Seed 1802 on 65e18de: the backend fell back to stock, whose compile raised a view's lazy error ("Output 1
    of Unbind is a view and its base or another view of its base has been modified inplace", the same for a view
    made under no_grad): AOTAutograd reads every ``grad_fn`` while it traces, eager only where a later op or a
    backward reads it. Stock crashes; the ceiling runs it. The graph now runs uncompiled there, as for the
    version-counter error (Note [Graphs the inner backend rejects]), and matches eager. 116 compiles since the
    session of 2026-12-06: ``exp``'s result, written under no_grad after ``unbind``, is recomputed in the backward
    and watched (output_rules.results_to_watch), so the write is replayed and no view is read early. 21 (called
    under inference_mode) is cut since a33ca94: with grad mode off no compiled segment reads a handed restricted
    view's grad_fn, so the later segment may write its base. 127 compiles since a8e08be: ``ScaledClone``'s backward
    reads nothing (Note [What a custom Function's backward reads]), so nothing compiled saves what the later write
    under no_grad changes."""
    program = generate(1802, index, ALL)
    by_label = {s.label: s for s in fuzz_strategies("aot_eager", ALL)}
    reference = run_program(program, eager())
    assert classify(reference, run_program(program, by_label["stock[aot_eager]"])).kind == "crash"
    run = run_program(program, by_label["prototype[aot_eager]"])
    assert classify(reference, run).kind == "match", classify(reference, run).describe()
    assert run.fallbacks == []


_UNNAMED_SYMBOL = """
import sys
import torch, torch._functorch.config
from predispatch_views.compare.fuzz import FUZZ_PROBES, _plan, _seeded, fuzz_strategies
from predispatch_views.compare.fuzz_program import generate, parse_dimensions
from predispatch_views.compare.probes import Raised, Subject, attempt
program = generate(int(sys.argv[1]), int(sys.argv[2]), parse_dimensions("all"))
strategy = {s.label: s for s in fuzz_strategies("aot_eager", parse_dimensions("all"))}[sys.argv[3]]
cases = program.cases()
torch._dynamo.reset()
torch._functorch.config.enable_autograd_cache = False
with strategy.context():
    made = strategy.make(cases[0].fn)
    for name, call in _plan(program, None):
        subject = Subject(_seeded(made, program.call_mode), cases[call], "cpu")
        observed = attempt(lambda: FUZZ_PROBES[name](subject.call))
        torch.set_grad_enabled(True)
        if isinstance(observed, Raised) and "sources must not be empty" in observed.message:
            raise SystemExit(f"{name} {call}: {observed.message}")
"""


@pytest.mark.parametrize(
    ("seed", "index", "label"), [(1803, 67, "prototype[aot_eager]"), (1701, 1741, "prototype[aot_eager,dynamic]")]
)
def test_an_input_dynamo_reached_under_two_sources_keeps_its_symbols(seed: int, index: int, label: str) -> None:
    """s1803_67 (found by seed 1803 on 0ee19ae, a crash where stock runs) and s1701_1741 (open since seed 1701,
    "nondeterministic"). The graph after a break takes an input and eager's view of it (``ReturnsInput``), or two
    views of one base. Dynamo's ``tensor_to_context`` keeps one context per tensor, the last it made, and the
    tensor's symbols were made under whichever source Dynamo wrapped first (``b`` or ``t0._base``); fakified with
    the other context (here, and in AOTAutograd's ``process_inputs``), the input got a new symbol that no guard could
    name: "sources must not be empty for symbol". The order follows a set Dynamo iterates, so the hash seed: on
    0ee19ae s1803_67 raised under PYTHONHASHSEED 0, 3 and 5 (not 1, 2, 4), s1701_1741 under 0, 3 and 5. The
    pipeline now restores each input's own context and caches in it the symbols of Dynamo's fake
    (``_torch_internals.restore_input_contexts``). The fuzzer's sequence for the program, in fresh processes, the
    AOTAutograd cache off (a hit on the second size hides it)."""
    import os
    import subprocess

    for hash_seed in ("0", "3", "5"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        command = [sys.executable, "-c", _UNNAMED_SYMBOL, str(seed), str(index), label]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, (hash_seed, done.stderr[-2000:])


@pytest.mark.parametrize("index", [61, 188, 947, 1183])
def test_s1831_a_restricted_views_write_the_epilogue_replays_runs_compiled(index: int) -> None:
    """Seed 1831 on 2497d9d: a graph after a break writes an input that is a multi-output view requiring grad (a
    Split output an earlier graph replayed) under no_grad, with grad mode on at the call. Every call of it ran
    uncompiled (Note [A restricted view aliased by a write]), though the epilogue replayed the write (188, 61, 947)
    or could (1183, a graph with no view output, compiled by the inner backend alone): only a write AOTAutograd
    makes raises. They replay and match eager with no fallback."""
    _assert_matches_without_fallback(1831, index, "prototype[aot_eager]")


def test_s1831_112_a_view_kept_from_a_break_is_replayed_where_stock_cannot_compile() -> None:
    """Seed 1831 on 2497d9d: a graph ending at a break returns Split outputs of an input the break's instruction (a
    dirty Function) may write, so it fell back to stock (MULTI_OUTPUT_VIEW_AT_GRAPH_BREAK); stock's compile met the
    backward version error of ``t0 = c.tanh(); t0.normal_()`` and the graph ran uncompiled, returning eager's views
    all the same. It is replayed instead (``stock_views.stock_unless_rejected``) and matches eager, no fallback."""
    _assert_matches_without_fallback(1831, 112, "prototype[aot_eager]")


@pytest.mark.parametrize("index", [40, 412, 421, 482, 530, 1210])
def test_s1831_a_no_grad_view_kept_from_a_break_crashes_as_the_ceiling_without_fallback(index: int) -> None:
    """Seed 1831 on 2497d9d: a no_grad view crossing a break fell back (NO_GRAD_VIEW_AT_GRAPH_BREAK), stock's compile
    raised the lazy view error and the graph ran uncompiled, so Dynamo crashed wrapping eager's view for the next
    graph, as the ceiling does. The graph is replayed instead: the same crash, the same error, no fallback."""
    program = generate(1831, index, ALL)
    by_label = {s.label: s for s in [*fuzz_strategies("aot_eager", ALL), *ceiling_strategies(ALL)]}
    run = run_program(program, by_label["prototype[aot_eager]"])
    ceiling = run_program(program, by_label["dynamo_eager[eager]"])
    assert run.fallbacks == []
    assert isinstance(ceiling.observations.get("forward"), Raised)
    assert run.observations.get("forward") == ceiling.observations.get("forward")


def _assert_matches_without_fallback(seed: int, index: int, label: str) -> None:
    """Fuzz program ``seed``/``index`` (every dimension) under ``label`` falls back nowhere and matches eager on
    every probe."""
    program = generate(seed, index, ALL)
    run = run_program(program, {s.label: s for s in fuzz_strategies("aot_eager", ALL)}[label])
    assert run.fallbacks == []
    outcome = classify(run_program(program, eager()), run)
    assert outcome.kind == "match", outcome.describe()


def _assert_no_violation(seed: int, index: int, label: str, stock_label: str) -> None:
    """Fuzz program ``seed``/``index`` (every dimension) under ``label`` breaks no rule of the invariant against
    ``stock_label``, the same setting's stock."""
    from predispatch_views.compare.fuzz import fuzz_strategies, violated_rule

    program = generate(seed, index, ALL)
    by_label = {s.label: s for s in fuzz_strategies("aot_eager", ALL)}
    reference = run_program(program, eager())
    stock = classify(reference, run_program(program, by_label[stock_label]))
    prototype = classify(reference, run_program(program, by_label[label]))
    assert violated_rule(prototype, stock) is None, prototype.describe()


@pytest.mark.parametrize(
    ("index", "label"),
    [(306, "prototype_fn[aot_eager]"), (117, "prototype_fn[aot_eager]"), (81, "prototype_fn[aot_eager]")],
)
def test_s1804_a_functions_view_written_under_no_grad_where_nothing_requires_grad(index: int, label: str) -> None:
    """Seed 1804 on 632c1e9, fallbacks that gave up nothing. 306: ``t1 = ReturnsInput.apply(a.detach())`` runs in
    eager between two segments and the later segment writes ``t1``'s split under no_grad; 117 writes a Function's
    result under no_grad, called under no_grad. The write was refused as s1701_803's (a custom Function's view
    raises on its ``grad_fn`` once written), but a view whose storage holds no value requiring grad has no
    ``grad_fn`` to read (segments._refused). 81: ``ReturnsInput.apply`` reads a ``split`` output, and the cut
    around it was refused as if the view came through an op that returns its input (s1203_834's eval dropout):
    ``graph_meta.through_a_copy`` asked ``returns_its_input``, true of every declared view; it now asks for an op
    whose schema promises a fresh tensor."""
    _assert_matches_without_fallback(1804, index, label)


_DEFAULT_AND_COMPILED_AUTOGRAD = [
    ("prototype[aot_eager]", "stock[aot_eager]"),
    ("prototype[aot_eager,compiled_autograd]", "stock[aot_eager,compiled_autograd]"),
]


@pytest.mark.parametrize(("label", "stock_label"), _DEFAULT_AND_COMPILED_AUTOGRAD)
def test_s1808_2663_a_replayed_view_written_by_the_caller_then_backward(label: str, stock_label: str) -> None:
    """Seed 1808 on e87db31, fixed (Note [A saved alias of a value the caller can write]): ``t1 =
    a.sum(2).transpose(1, 0)`` is returned (replayed in the epilogue), and
    ``t2 = t1.sin()`` feeds only an ``add(..., out=)`` under no_grad. The caller writes ``t1`` in place and
    backwards through it: eager's backward never reaches ``sin``'s node and runs; stock runs; the prototype's
    compiled backward raises "modified by an inplace operation" on a [3, 2] tensor (a value the core saved that
    shares the version counter of its output ``sum_1``, the base of the replayed ``transpose``). The core's compiled
    forward (aot_eager) returns ``(sum_1, sin, empty_like, transpose)``: the ``add(..., out=)`` under no_grad is dead
    (nothing reads ``u0``), and the partitioner moves it into the backward, saving its inputs, among them the core's
    own ``transpose``, a view of ``sum_1``; the caller's write to the replayed view bumps that shared counter (the
    cause is the saved ``transpose`` of ``sin``, not the dead write). The core now returns ``sum_1`` through
    ``alias``, which AOTAutograd returns through its own ``_unsafe_view``, with a version counter of its own."""
    _assert_no_violation(1808, 2663, label, stock_label)


@pytest.mark.parametrize(("label", "stock_label"), _DEFAULT_AND_COMPILED_AUTOGRAD)
def test_s1808_751_a_second_backward_after_an_input_written_under_no_grad(label: str, stock_label: str) -> None:
    """Seed 1808 on e87db31: a ``split`` of a view of the input ``a``, ``sin`` of one half, an ``out=`` write
    under no_grad (a graph break), then ``torch.add(a, a, out=a)`` under no_grad and ``a.exp()``. A second backward
    (no retain_graph) raised "Trying to backward through the graph a second time" under the prototype where eager's
    and stock's run: eager's (and stock's) first backward raises on ``sin``'s saved view of the written ``a``, before
    it frees the ``MulBackward0`` both outputs share; the first graph's core does not return the view (the epilogue
    replays it), so the partitioner saved ``cos`` instead and the first backward ran and freed it. Fixed by Note [A
    saved view of an input the epilogue views] (runtime.py): a pre-hook checks ``a``'s version; under compiled
    autograd the graph falls back."""
    _assert_no_violation(1808, 751, label, stock_label)


def test_s1808_1837_a_dropout_after_a_written_chunk_under_compiled_autograd() -> None:
    """Seed 1808 on e87db31, compiled autograd only: ``t3 = t2.t()`` of a ``chunk`` output written under no_grad by
    ``t3.copy_(t2)``, then ``F.dropout(a, 0.5, True)`` nothing reads. Compiled autograd turns off the cut around
    saved writes, so the graph falls back to stock (the core writes through a view), compiled keeping the dead
    draw: AOTAutograd's default partitioner raised "Expected native_dropout to be a tensor" where stock, dropping
    it, runs. The graph now runs uncompiled (Note [A kept draw the partitioner refuses])."""
    _assert_no_violation(1808, 1837, "prototype[aot_eager,compiled_autograd]", "stock[aot_eager,compiled_autograd]")


@pytest.mark.parametrize("index", [447, 334])
@pytest.mark.parametrize("label", ["prototype[aot_eager]", "prototype_fn[aot_eager]"])
def test_s1809_a_watch_asks_eager_what_a_call_saves(index: int, label: str) -> None:
    """Seed 1809 on af4048f (a partial run, stopped for the fix): a returned ``t0 = a.sum(0)`` and
    ``F.dropout(t0, 0.5, True)`` (447): the watch of Note [A saved alias of a value the caller can write] took
    ``saved_by_backward``'s superset, by which a dropout reads its input, and raised after the caller's write where
    eager's dropout saved only its mask. The watches now ask eager's own nodes (``eager_saved_args``)."""
    _assert_no_violation(1809, index, label, "stock[aot_eager]")


def test_s1809_550_a_dirty_function_after_writes_under_compiled_autograd() -> None:
    """Seed 1809 (present on e87db31): writes to a slice of an input (``t1.add_``, an ``out=`` under no_grad),
    ``MarkDirty.apply(t1.sin())`` and a ``tensor_split`` of it, under compiled autograd. The backward graph compiled
    autograd hands the backend (a resumed graph) failed in the inner backend with "derivative for aten::copy is not
    implemented" (a functional ``copy`` traced from the replayed writes' ``CopySlices``) where stock's backward runs.
    That graph now runs uncompiled, as the ceiling's does (Note [Graphs the inner backend rejects])."""
    _assert_no_violation(1809, 550, "prototype[aot_eager,compiled_autograd]", "stock[aot_eager,compiled_autograd]")


def test_s1810_805_a_reshape_after_a_metadata_write_in_segments_under_dynamic_shapes() -> None:
    """Seed 1810 (present on e87db31; ``dynamic=True``): the graph after an ``out=`` break holds
    ``t3.transpose_(0, 1)`` on a ``tensor_split`` output, then ``t7 = t3.sin().to(torch.float32).reshape(...)``; the
    replayed ``reshape`` raised "shape '[2, 2]' is invalid for input of size 2" where eager's and stock's forward
    run. make_fx bound ``t3``'s new size symbol to ``sym_size(t3, 1)`` when it made ``t3`` but emitted the read at
    its first use, after the ``transpose_``. The capture now moves each size read to where its value was bound
    (Note [make_fx's lazy size reads])."""
    _assert_no_violation(1810, 805, "prototype[aot_eager,dynamic]", "stock[aot_eager,dynamic]")


@pytest.mark.parametrize("label", ["prototype[aot_eager]", "prototype_fn[aot_eager]"])
def test_s1810_2065_a_watched_output_written_names_its_node(label: str) -> None:
    """Seed 1810 on 363e3e7 (``compile_function``): ``t0 = a * b`` returned and saved by ``t0.sin()``; the caller
    writes ``t0``, then a backward: eager raises "..., which is output 0 of Mul, ..."; the watch of Note [A saved
    alias of a value the caller can write] named no node. Where the saved value is the output itself, the watch
    names the output's node as it is when it raises, as eager's message does."""
    _assert_no_violation(1810, 2065, label, "stock[aot_eager]")


def test_s1811_277_a_read_before_a_written_alias_is_a_part_of_its_own() -> None:
    """Seed 1811 on 4f63b9a (``compile_function``): ``t0 = c.sin()``, then ``b.mul_(2.0)`` with ``b`` and ``c``
    views of one base, returning ``t0.t_()`` and ``c``. One compiled function saved ``c`` for ``sin`` and wrote
    ``b``; a backward through ``c`` alone reached it, unpacked the saved ``c`` the write had bumped, and raised
    the version error where eager's backward never reaches ``sin`` (Dynamo's graph break at the ``out=`` call kept
    stock's ``sin`` apart). A read before every write of its input's aliases now may be a part of its own
    (Note [Independent parts of the core])."""
    _assert_no_violation(1811, 277, "prototype_fn[aot_eager]", "stock[aot_eager]")


@pytest.mark.parametrize("label", ["prototype[aot_eager]", "prototype[aot_eager,dynamic]"])
def test_s1811_1240_a_no_grad_write_of_a_functions_view_from_its_tuple(label: str) -> None:
    """Seed 1811 on 4f63b9a: ``t2 = ReturnsInput.apply(F.dropout(a, 0.0, True))``, then ``t2.uniform_()`` under
    no_grad. The Function ran in eager between two segments (eager's view of ``a``), and the compiled segment
    after it wrote that view: AOTAutograd read its ``grad_fn``, which raised "Output 0 of ApplyTemplate is a view
    and its base ... has been modified inplace" where eager's forward runs. The cut's check for such a write
    (s1701_803) looked at the Function's node, where Dynamo's graph hands over a ``getitem`` of its tuple; it now
    looks through it, and the graph falls back as stock's runs."""
    _assert_no_violation(1811, 1240, label, label.replace("prototype", "stock"))


def test_s1812_596_a_symbolic_size_is_no_reader_of_a_watched_value() -> None:
    """Seed 1812 on ed2e503 (present on e93dcc1): called under no_grad, recompiled with a dynamic size, the core
    returned ``t4.sigmoid()``'s saver's descendants, a symbolic size among them; the watch of Note [Eager's version
    error] asked that ``int`` for its ``grad_fn`` and raised AttributeError where eager's forward runs. A size is no
    reader now, and a watch of a value that requires no grad returns before it looks at its readers."""
    _assert_no_violation(1812, 596, "prototype[aot_eager]", "stock[aot_eager]")


@pytest.mark.parametrize("label", ["prototype[aot_eager]", "prototype_fn[aot_eager]"])
def test_s1812_696_a_no_grad_view_of_a_kept_eval_dropout_written_under_no_grad(label: str) -> None:
    """Seed 1812 on ed2e503: ``t5 = F.dropout(d, 0.5, False)`` of an input the core also differentiates
    stays in the core (Note [An eval dropout of an input the core reads]) and returns stock's fresh tensor, so the
    forward is as wrong as stock's (eager's ``t5.sin_()`` under no_grad writes ``d``). The epilogue then replays
    ``t5.sin_()`` and ``t7 = t5.select(0, 0)`` under no_grad on that fresh tensor; after the caller writes the
    returned ``t6 = t5.reshape(...)`` with grad (eager refuses: a view of a leaf), reading ``t7.grad_fn`` raises
    "A view was created in no_grad mode and its base ... has been modified inplace with grad mode enabled" where
    stock's regenerated ``t7`` does not. The walk that keeps a kept dropout's views in the core now goes through
    in-place writes (output_rules.views_a_kept_eval_dropout): ``t7`` is stock's answer, as ``t6`` was (open from
    seed 1812 until session 25). On torch 2.14 the decomposition returns the input (no kept clone), the epilogue
    replays eager's write of ``d`` and the prototype matches eager."""
    _assert_no_violation(1812, 696, label, "stock[aot_eager]")


@pytest.mark.parametrize(
    ("label", "stock_label"),
    [
        ("prototype[aot_eager]", "stock[aot_eager]"),
        ("prototype_fn[aot_eager]", "stock[aot_eager]"),
        ("prototype[aot_eager,dynamic]", "stock[aot_eager,dynamic]"),
    ],
)
def test_s1817_1706_a_dropout_only_replayed_code_reads_returns_its_input(label: str, stock_label: str) -> None:
    """Seed 1817 on 70bbec5 (present on db35ab4): ``t4 = F.dropout(t2, 0.0, True)`` of a ``tensor_split`` output,
    whose storage only replayed code reads besides (``t2.detach().mul_(3.0)``, then ``t7.copy_(t4)`` through a
    view of it), was kept in the core (Note [An eval dropout of an input the core reads]) because the replayed
    ``copy_`` counted as a reader the partitioner may save for: the forward had stock's wrong values and the second
    of two backwards, through the kept dropout's saved mask, raised where eager's runs. Only compiled readers count
    now: the dropout is replayed as its input, and every probe is eager's."""
    from predispatch_views.compare.fuzz import fuzz_strategies

    program = generate(1817, 1706, ALL)
    by_label = {s.label: s for s in fuzz_strategies("aot_eager", ALL)}
    reference = run_program(program, eager())
    outcome = classify(reference, run_program(program, by_label[label]))
    assert outcome.kind == "match", outcome.describe()


@pytest.mark.parametrize(
    ("label", "stock_label"),
    [("prototype[aot_eager]", "stock[aot_eager]"), ("prototype[aot_eager,dynamic]", "stock[aot_eager,dynamic]")],
)
def test_s1817_2120_an_empty_like_of_a_no_grad_view_needs_no_fallback(label: str, stock_label: str) -> None:
    """Seed 1817 on 70bbec5 (present on db35ab4): the graph after an ``out=`` break read ``t1``, a no_grad view of
    an input requiring grad, with ``torch.empty_like`` and fell back to stock (Note [A view taken under no_grad
    keeps its base's requires_grad]); stock's ``t1`` let the caller write it with grad where eager's refuses, and
    the first graph's replayed no_grad view ``t0`` of the same input then refused its ``grad_fn``. ``empty_like``'s
    result requires no grad in eager either: no fallback, every probe eager's."""
    _assert_matches_without_fallback(1817, 2120, label)


@pytest.mark.parametrize(
    ("label", "stock_label"),
    [
        ("prototype[aot_eager]", "stock[aot_eager]"),
        ("prototype[aot_eager,compiled_autograd]", "stock[aot_eager,compiled_autograd]"),
    ],
)
def test_s1820_651_a_no_grad_view_of_stocks_unbind_output_between_two_breaks(label: str, stock_label: str) -> None:
    """Seed 1820 on 5425d7c (present on 746416f): the graph between two breaks replayed ``t6 = t5.narrow(...)``
    under no_grad of ``t5``, stock's unbind output from the fallen-back graph before, which the caller may write
    where eager's refuses; ``t6.grad_fn`` then raised where stock's runs (tests/test_stock_views.py has the
    three causes)."""
    _assert_no_violation(1820, 651, label, stock_label)


@pytest.mark.parametrize(
    ("label", "stock_label"),
    [
        ("prototype[aot_eager]", "stock[aot_eager]"),
        ("prototype[aot_eager,compiled_autograd]", "stock[aot_eager,compiled_autograd]"),
    ],
)
def test_s1820_805_a_metadata_write_to_an_inlined_functions_view_falls_back_as_traced(
    label: str, stock_label: str
) -> None:
    """Seed 1820 on 5425d7c: called under no_grad, Dynamo inlined ``t4 = ReturnsInput.apply(b)`` and traced
    eager's view of ``b`` (Note [An inlined Function returns its input as eager does]), then ``t4.unsqueeze_(3)``.
    The graph falls back; stripped of the view for stock, the metadata write became one of the input ``b`` itself,
    a graph Dynamo never makes (its own trace breaks there), and AOTAutograd's compile raised where eager and stock
    run. The graph as traced is compiled instead (inner_backend.inner_or_uncompiled)."""
    _assert_no_violation(1820, 805, label, stock_label)


def test_s1821_716_a_detach_is_no_no_grad_view_to_check() -> None:
    """Seed 1821 on d0ea4dd (a regression of d0ea4dd, called under inference_mode): the graph after a break returns
    ``detach`` of an input, which d0ea4dd's check counted as a possible no_grad view (its geometry is its input's),
    so the call ran stock's program, whose output (an inference-mode view) refuses the caller's write where eager's
    accepts it. A ``detach``, or an op returning its input itself, is no new view."""
    _assert_no_violation(1821, 716, "prototype[aot_eager]", "stock[aot_eager]")


def test_s1812_1567_a_separated_output_that_requires_no_grad_is_no_view() -> None:
    """Seed 1812 on ed2e503 (``compile_function``): ``t2 = t0.detach().mul_(3.0).sigmoid()`` is returned and saved
    by ``t3 = t2 * t0``'s node. Note [A saved alias of a value the caller can write] returned it through
    ``alias(t2)``; it requires no grad, and AOTAutograd handed it back as a view of the core's intermediate
    (``t2._is_view()`` where eager's is no view), not through its ``_unsafe_view``. Such an output is now a
    ``clone``, and its watch no longer skips a value that requires no grad (mul's node still saved it), so
    eager's version error after the caller writes ``t2`` is kept."""
    _assert_no_violation(1812, 1567, "prototype_fn[aot_eager]", "stock[aot_eager]")


@pytest.mark.parametrize("label", ["prototype[aot_eager]", "prototype_fn[aot_eager]"])
def test_s1812_2373_a_no_grad_write_to_the_base_of_a_functions_view(label: str) -> None:
    """Seed 1812 on ed2e503: ``t0 = ReturnsInput.apply(c)``, ``t3 = t0.expand(2, 2)`` returned, then ``b.zero_()``
    under no_grad with ``b`` and ``c`` views of one base. Cut around the call, the segment after it was handed
    ``t0`` as a traced value of its own storage: it did not see ``t0`` alias ``b``, kept the write in the core and
    replayed the expand after it, which read ``t0``'s ``grad_fn`` after the write and raised (a Function's view).
    The crossing value is now the input's example viewed with its geometry (graph_meta.as_input_alias): the write
    is replayed after the expand, as eager runs it."""
    _assert_no_violation(1812, 2373, label, "stock[aot_eager]")


def _function_view_then_no_grad_write(b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor]:
    t0 = ReturnsInput.apply(c)
    t3 = t0.expand(2, t0.shape[0])
    with torch.no_grad():
        b.zero_()
    return (t3,)


def test_s1812_2373_with_symbolic_sizes() -> None:
    """The same program under ``dynamic=True``: the Function's result has a symbolic geometry, which
    ``as_input_alias`` cannot lay over the real example (the trace's symbols are not Dynamo's). The segment after
    the call missed the alias and its replayed ``expand`` raised the Function view's error where eager and stock
    run (present before session 24's fix too). The cut is refused there: the graph falls back, with the call's
    reason, and runs as stock does."""
    compiled = torch.compile(
        _function_view_then_no_grad_write, backend=predispatch_views.backend("aot_eager"), dynamic=True
    )
    predispatch_views.FALLBACKS.clear()
    for n in (2, 3):
        inputs = [torch.randn(2, n, generator=torch.Generator().manual_seed(n), requires_grad=True).mul(1)]
        eager_base, base = inputs[0].detach().clone().requires_grad_(), inputs[0]
        (want,) = _function_view_then_no_grad_write(eager_base[0], eager_base[1])
        (got,) = compiled(base[0], base[1])
        torch.testing.assert_close(got.detach(), want.detach())  # eager's grad_fn raises; stock's does not
        torch.testing.assert_close(base.detach(), eager_base.detach())
    assert any("returns an input" in reason for _, reason in predispatch_views.FALLBACKS)


def test_a_view_crossing_a_cut_keeps_its_traced_example() -> None:
    """Fuzz seed 1814 on 44dd7eb (s1814_143, 252, 441): as_input_alias laid every crossing value sharing an input's
    storage over Dynamo's real example; the segment's compile then made symbols without a source and Dynamo's guard
    building raised IndexError where eager and stock run. It is applied to a Function's returned input only."""
    for index in (143, 252, 441):
        _assert_no_violation(1814, index, "prototype[aot_eager]", "stock[aot_eager]")


@pytest.mark.parametrize(
    "seed, index",
    [(1827, 47), (1826, 133)],  # a write of a handed restricted view; a read of one whose base the call wrote
)
def test_a_cut_around_a_function_runs_the_refused_node_in_eager_too(seed: int, index: int) -> None:
    """compile_function ran these eagerly: the cut around a custom Function's call was refused for a node of the part
    after it (Note [Segments]: a write of a restricted view an earlier segment handed over, s1827_47; a read of one
    whose base the call wrote, s1826_133). The uncompiled part now runs through that node (``RunEagerlyThrough``) and
    the program matches eager with no fallback."""
    program = generate(seed, index, ALL)
    by_label = {s.label: s for s in fuzz_strategies("aot_eager", ALL)}
    reference = run_program(program, eager())
    run = run_program(program, by_label["prototype_fn[aot_eager]"])
    assert classify(reference, run).kind == "match", classify(reference, run).describe()
    assert run.fallbacks == []


def test_s1826_889_an_uncompiled_segment_that_raises_under_no_grad_restores_grad_mode() -> None:
    """compile_function ran fuzz_s1826_889 eagerly until ef9db0e, whose uncompiled segment runs through two no_grad
    writes; eager's own error there (``torch.abs(t0, out=t1)`` of overlapping views) left grad mode off after the
    call, where eager's ``with torch.no_grad()`` restores it (the after_call probe; the ceiling, Dynamo, leaves it
    off too). The segment's runner now restores the caller's grad mode when it raises."""
    program = generate(1826, 889, ALL)
    by_label = {s.label: s for s in fuzz_strategies("aot_eager", ALL)}
    reference = run_program(program, eager())
    run = run_program(program, by_label["prototype_fn[aot_eager]"])
    assert classify(reference, run).kind == "match", classify(reference, run).describe()
    assert run.fallbacks == []


@pytest.mark.parametrize("index", [229, 835, 1240, 2365])
def test_a_write_through_a_full_view_of_a_viewed_base_is_cut_before(index: int) -> None:
    """These fell back to stock: the compiled region wrote a base the epilogue views through a view covering all of
    it (``t4 = F.dropout(t3, 0.5, False)``, eager's t3 itself, then ``t4.mul_(-1.0)``; s1826_835, where stock's
    forward value is wrong). The program is now cut before the write (Note [A write through a view of a base the
    epilogue views]) and matches eager with no fallback."""
    program = generate(1826, index, ALL)
    by_label = {s.label: s for s in fuzz_strategies("aot_eager", ALL)}
    reference = run_program(program, eager())
    run = run_program(program, by_label["prototype[aot_eager]"])
    assert classify(reference, run).kind == "match", classify(reference, run).describe()
    assert run.fallbacks == []


def test_s1826_1926_the_uncompiled_segment_of_a_dirty_call_starts_at_the_saver() -> None:
    """``t0.sin_(); t1 = t0[1:2]; t2 = MarkDirty.apply(t0)``: the cut around the call was refused (the compiled
    ``sin_`` before it may save t0, which the call writes) and the graph fell back to stock, whose grad_fn differs
    from eager's; the uncompiled segment now starts at ``sin_`` (``RunEagerlyFrom``)."""
    program = generate(1826, 1926, ALL)
    by_label = {s.label: s for s in fuzz_strategies("aot_eager", ALL)}
    reference = run_program(program, eager())
    for label in ("prototype[aot_eager]", "prototype_fn[aot_eager]"):
        run = run_program(program, by_label[label])
        assert classify(reference, run).kind == "match", classify(reference, run).describe()
        assert run.fallbacks == []


def test_s1826_426_the_uncompiled_segment_does_not_start_earlier_before_a_hidden_write() -> None:
    """Starting the uncompiled segment at ``exp`` left the later no_grad ``torch.sub(t2, t2, out=t0)`` to a compiled
    segment, whose version bump under aot_eager is one more than eager's: the backward's error said "Exp, is at
    version 5" where eager's says 4. The extension is refused there (segment_savers.hidden_write_after): the graph
    falls back as before and matches eager."""
    program = generate(1826, 426, ALL)
    by_label = {s.label: s for s in fuzz_strategies("aot_eager", ALL)}
    reference = run_program(program, eager())
    run = run_program(program, by_label["prototype[aot_eager]"])
    assert classify(reference, run).kind == "match", classify(reference, run).describe()


def test_s1830_806_a_cut_inside_a_cut_knows_which_inputs_cross_the_graph_break() -> None:
    """Seed 1830 on 83a5591: in a graph Dynamo resumed after a break, ``t2 = MarkDirty.apply(t1)`` is cut around, and
    the segment after it is cut again around a no_grad write. The inner cut took every input of that segment for
    one from before the break, so ``t6 = t2.narrow(...)`` under no_grad, of the dirty call's own result (eager's
    value, handed over by the outer cut), fell back as a no_grad view of stock's view across the break: the graph
    went to stock, whose ``is_leaf`` differs from eager's. The inner cut now composes the outer one's breaks
    (crossing_values.graph_breaks_of_stage)."""
    _assert_matches_without_fallback(1830, 806, "prototype[aot_eager]")


def test_s1830_656_a_later_segment_is_cut_around_a_write_to_a_value_it_computes() -> None:
    """Seed 1830 on 83a5591: ``t1 = MarkDirty.apply(t0)`` is cut around; the segment after it computes ``t2 =
    b.tanh()``, which tanh's backward saves, and writes it (``t5 = t2.detach(); t5.mul_(3.0)``). A later segment was
    never cut around a saved write (s1805_419: earlier segments' writes to its inputs are not in its graph), so the
    graph went to stock, whose output is no view. A later segment is now cut around a value it computes itself
    (Note [A write to a value a backward saved])."""
    _assert_matches_without_fallback(1830, 656, "prototype[aot_eager]")
