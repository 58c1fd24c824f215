"""The differential fuzzer: random programs (fuzz_program.py) under every strategy, every probe compared with eager.

``python -m predispatch_views compare --fuzz N --seed S [--inner aot_eager]`` runs programs ``(S, 0..N-1)``
under eager, stock, the prototype backend and compile_function; each is observed by every probe of the parity
suite (probes.PROBES) plus two probes of its own (``after_call``: grad mode and the next random draw after the
call, which may raise; ``sharing``: which outputs and inputs share a version counter, which are the same object).
The RNG is seeded before every call so programs with random ops are comparable.

Each (program, strategy) is classified against eager: ``match``, ``divergence`` (some probe differs), ``crash``
(the strategy raised where eager did not, or raised another exception type), and ``fallback`` (the prototype
logged a fallback: pipeline.FALLBACKS grew; its outcome is kept too). The key figure is the number of programs
where a prototype strategy diverges or crashes while stock matches eager; each of those is shrunk (statements and
outputs deleted while the prototype still fails the same way and stock still matches) and printed.

``--fuzz-dimensions`` (Note [Fuzz dimensions] in fuzz_program.py; default ``all``) adds what the classic fuzzer never
generated. Programs: ``out=`` calls, int / list / None inputs, calls with other sizes (each call observed by every
probe, keys ``<probe>@call2``...), calls under no_grad or inference_mode (eager's too). Strategy settings, each
with a stock of the same setting as its control: ``dynamic`` (``dynamic=True``) and ``compiled_autograd``
(``torch._dynamo.config.compiled_autograd`` on, and compiled autograd around every probe, so that the probes'
backward runs through it, its graph compiled by the strategy's own backend). Without a setting, a strategy is
``torch.compile``'s default (``dynamic=None``: static, then automatic dynamic on a size change); with
``classic``, it is ``dynamic=False`` and the programs are the classic generator's, as before.

The ceiling (issue 22, ceiling.py): ``dynamo_eager`` (Dynamo with ``backend="eager"``) runs every program too, under
each setting, as an extra strategy; it never judges the invariant (stock does), it measures the gap: per entry
point, ``gap closed`` over the programs whose eager forward runs, and ``below_the_ceiling`` (diagnostics), the
programs where the entry point differs from eager while the ceiling under the same setting matches.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import functools
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch._dynamo import compiled_autograd

from .. import pipeline
from ..backend import backend as prototype_backend
from .ceiling import Gap, Result, ceiling_label_for, gap_markdown, gap_text, gaps, is_below_the_ceiling
from .fuzz_program import (
    Program,
    call_mode_context,
    dimensions_text,
    generate,
    shrink,
)
from .parity import _isolated
from .probes import PROBES, Call, Raised, Subject, attempt, describe, differences
from .report import stock_version_line
from .strategies import (
    CEILING,
    CEILING_BACKEND,
    Strategy,
    dynamo_eager,
    eager,
    prototype,
    prototype_fn,
    stock,
    stock_fn,
)

RNG_SEED = 1234

# ---------------------------------------------------------------------------------------------------------
# The fuzzer's own probes.
# ---------------------------------------------------------------------------------------------------------


def probe_after_call(call: Callable[[], Call]) -> Any:
    """Grad mode after one call, also when it raised (issue 9, class 3); the next random draw if it returned.

    How much randomness a program drew before it raised is not compared (compiling may raise before running).
    """
    outcome = attempt(lambda: call() and None)
    record = {
        "call": outcome,
        "grad_enabled": torch.is_grad_enabled(),
        "next_random": "the call raised" if isinstance(outcome, Raised) else torch.rand(4),
    }
    torch.set_grad_enabled(True)
    return record


def probe_sharing(call: Callable[[], Call]) -> Any:
    """For each output, then each watched input: the tensors sharing its version counter, and its duplicates."""
    c = call()
    tensors = [t for _, t in c.tensors] + c.watched

    def shared_with(t: torch.Tensor) -> list[int]:
        before = [u._version for u in tensors]
        torch.autograd.graph.increment_version(t)
        return [j for j, (u, b) in enumerate(zip(tensors, before)) if u._version != b]

    return {
        "version_counter": [attempt(lambda t=t: shared_with(t)) for t in tensors],
        "same_object": [[j for j, u in enumerate(tensors) if u is t] for t in tensors],
    }


FUZZ_PROBES: dict[str, Callable[[Callable[[], Call]], Any]] = {
    **PROBES,
    "after_call": probe_after_call,
    "sharing": probe_sharing,
}

# ---------------------------------------------------------------------------------------------------------
# Running one program under one strategy.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FuzzStrategy(Strategy):
    """A strategy under a setting of the new dimensions (``dynamic``, ``compiled_autograd``), labelled
    ``name[inner,setting]``; ``context`` is entered around compiling and every probe."""

    setting: str = ""
    context: Callable[[], Any] = contextlib.nullcontext

    @property
    def label(self) -> str:
        if self.inner is None or not self.setting:
            return super().label
        return f"{self.name}[{self.inner},{self.setting}]"


def setting_of(s: Strategy) -> str:
    return getattr(s, "setting", "")


DYNAMIC = "dynamic"
COMPILED_AUTOGRAD = "compiled_autograd"


@contextlib.contextmanager
def _compiled_autograd(backend: Any) -> Any:
    """Compiled autograd as PyTorch's dynamo-wrapped CI runs it: the config on while compiling, and every backward
    (here: the probes', outside the compiled call) through compiled autograd, whose graph the same backend
    compiles (what a compiled function's own ``rebuild_ctx`` would give it)."""

    def compiler(gm: torch.fx.GraphModule) -> Any:
        return torch.compile(gm, backend=backend)

    with torch._dynamo.config.patch(compiled_autograd=True), compiled_autograd._enable(compiler, dynamic=False):
        yield


def _variant(name: str, inner: str, backend: Any, setting: str = "") -> FuzzStrategy:
    dynamic = True if setting == DYNAMIC else None  # None: torch.compile's default, automatic dynamic
    context: Callable[[], Any] = contextlib.nullcontext
    if setting == COMPILED_AUTOGRAD:
        context = functools.partial(_compiled_autograd, backend)
    return FuzzStrategy(
        name, inner, lambda fn: torch.compile(fn, backend=backend, dynamic=dynamic), setting=setting, context=context
    )


def fuzz_strategies(inner: str, dimensions: frozenset[str] = frozenset()) -> list[Strategy]:
    """Eager, then stock, the backend and compile_function; with the new dimensions, stock and the backend again
    under each strategy setting (compile_function has neither: its shapes are static, it retraces)."""
    if not dimensions:
        return [eager(), stock(inner), prototype(inner), prototype_fn(inner)]
    found: list[Strategy] = [
        eager(),
        _variant("stock", inner, inner),
        _variant("prototype", inner, prototype_backend(inner)),
        prototype_fn(inner),
    ]
    for setting in (DYNAMIC, COMPILED_AUTOGRAD):
        if setting in dimensions:
            found += [
                _variant("stock", inner, inner, setting),
                _variant("prototype", inner, prototype_backend(inner), setting),
            ]
    return found


def ceiling_strategies(dimensions: frozenset[str] = frozenset()) -> list[Strategy]:
    """The ceiling under each setting the stock controls have: ``dynamo_eager`` as stock is made, backend ``eager``."""
    if not dimensions:
        return [dynamo_eager()]
    found: list[Strategy] = [_variant(CEILING, CEILING_BACKEND, CEILING_BACKEND)]
    found += [
        _variant(CEILING, CEILING_BACKEND, CEILING_BACKEND, setting)
        for setting in (DYNAMIC, COMPILED_AUTOGRAD)
        if setting in dimensions
    ]
    return found


def strategy_set(inners: Sequence[str], dimensions: frozenset[str] = frozenset()) -> list[Strategy]:
    """What ``compare --fuzz`` runs: eager, the ceiling, then stock, the backend and compile_function per inner."""
    found = [eager(), *ceiling_strategies(dimensions)]
    for inner in inners:
        found += fuzz_strategies(inner, dimensions)[1:]
    return found


def _seeded(fn: Callable[..., Any], mode: str = "") -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        torch.manual_seed(RNG_SEED)  # outside the compiled function: every call draws the same numbers
        with call_mode_context(mode):  # the whole call under no_grad or inference_mode (eager's too)
            return fn(*args)

    return run


@dataclass
class Run:
    observations: dict[str, Any]
    fallbacks: list[str]
    seconds: float


def probe_key(name: str, call: int) -> str:
    """The observation's key: the probe's name on the first call, ``name@call2`` on the second..."""
    return name if call == 0 else f"{name}@call{call + 1}"


def parse_probe_key(key: str) -> tuple[str, int]:
    name, _, call = key.partition("@call")
    return name, int(call) - 1 if call else 0


# The probes of a program's second and third call (all of them on the first): each probe calls the program once or
# more, and each backward of a new shape compiles again under compiled autograd.
LATER_CALL_PROBES = ("forward", "alias", "grad_fn", "backward", "mutate_output", "after_call")


def _plan(program: Program, probes: Sequence[str] | None) -> list[tuple[str, int]]:
    """(probe, call) in the order they run: every call's probes before the next call's, as a user's calls come
    (LATER_CALL_PROBES on the calls after the first).

    Asked for a later call's probes only, the forward of each earlier call runs first (automatic dynamic shapes
    recompile on the second size seen). A call the program does not have is left out.
    """
    calls = len(program.call_params)
    wanted = (
        [(name, call) for call in range(calls) for name in (FUZZ_PROBES if call == 0 else LATER_CALL_PROBES)]
        if probes is None
        else [p for p in map(parse_probe_key, probes) if p[1] < calls]
    )
    last = max((call for _, call in wanted), default=0)
    plan: list[tuple[str, int]] = []
    for call in range(last + 1):
        here = [p for p in wanted if p[1] == call]
        plan += here or [("forward", call)]
    return plan


def run_program(program: Program, strategy: Strategy, probes: Sequence[str] | None = None) -> Run:
    torch._dynamo.reset()
    pipeline.FALLBACKS.clear()
    start = time.perf_counter()
    observations: dict[str, Any] = {}
    context = getattr(strategy, "context", contextlib.nullcontext)
    # AOTAutograd traces the backward under anomaly mode: eager errors in it would print a warning each.
    with _isolated(), warnings.catch_warnings(), context():
        warnings.simplefilter("ignore")
        cases = program.cases()
        made = attempt(lambda: strategy.make(cases[0].fn))  # one compiled function for every call
        for name, call in _plan(program, probes):
            key = probe_key(name, call)
            if isinstance(made, Raised):
                observations[key] = made
                continue
            subject = Subject(_seeded(made, program.call_mode), cases[call], "cpu")
            observations[key] = attempt(lambda name=name, subject=subject: FUZZ_PROBES[name](subject.call))
            torch.set_grad_enabled(True)  # a probe that leaves grad mode off must not change the next one
    fallbacks = [reason for _, reason in pipeline.FALLBACKS]
    torch._dynamo.reset()
    return Run(observations, fallbacks, time.perf_counter() - start)


@dataclass
class Outcome:
    kind: str  # match, divergence or crash
    probe: str | None = None
    path: str = ""
    expected: Any = None
    actual: Any = None

    def describe(self) -> str:
        if self.kind == "match":
            return "match"
        where = f"{self.probe}{self.path}"
        return f"{self.kind} in {where}: eager {describe(self.expected, 400)} / got {describe(self.actual, 400)}"


def classify(reference: Run, run: Run, probes: Sequence[str] | None = None) -> Outcome:
    """Crash if some probe raised where eager did not (or raised another type); else the first divergence.

    A crash anywhere inside a probe counts, not only at its first difference: ``backward_twice`` whose first
    backward gives other gradients and whose second raises is a crash (found by the fuzzer: stock's crash hid
    behind its gradients, so the same crash of the prototype looked like one stock does not have).

    Eager's own error wrapped by Dynamo (``InternalTorchDynamoError: RuntimeError: <eager's message>``, raised
    when Dynamo meets eager's lazy error while tracing a later graph) is eager's error: a divergence of type,
    not a crash.
    """
    first: Outcome | None = None
    for name in reference.observations if probes is None else probes:
        for path, expected, actual in differences(reference.observations[name], run.observations[name]):
            outcome = Outcome("divergence", name, "" if path == "." else path, expected, actual)
            if isinstance(actual, Raised) and (
                not isinstance(expected, Raised)
                or (expected.type != actual.type and expected.message.splitlines()[0] not in actual.message)
            ):
                outcome.kind = "crash"
                return outcome
            first = first or outcome
    return first or Outcome("match")


# ---------------------------------------------------------------------------------------------------------
# The fuzzing loop.
# ---------------------------------------------------------------------------------------------------------


@dataclass
class StrategyResult:
    outcome: Outcome
    fallbacks: list[str]
    seconds: float
    forward_runs: bool = True  # the first call's forward returned (eager's: the program is in the gap's count)

    @property
    def category(self) -> str:
        return "fallback" if self.fallbacks else self.outcome.kind


# Note [Fuzz rules]
# The two things the prototype must never do (issue 9's invariant): differ from eager where stock matches eager,
# and crash where stock does not. A third rule is diagnostics only (below). Each failing program is shrunk under
# its rule, but the shrinker runs only forward and the failing probe: stock may then match on those probes where it
# diverged on another, so a candidate keeps the failure when the rule still *breaks* (``breaks``), not when the
# first rule ``violated_rule`` finds is the same.
WRONG_WHERE_STOCK_MATCHES = "wrong where stock matches"
CRASH_WHERE_STOCK_RUNS = "crash where stock runs"
# Diagnostics, not the invariant: on a program where stock diverges too, some probe where the prototype differs
# from eager and stock does not (a random op drawn twice, grad mode left off... hide behind stock's lost views).
WRONG_ON_A_PROBE = "wrong on a probe where stock is right"
# Reported apart from the invariant: a crash where stock runs that the ceiling (Dynamo with backend="eager", same
# setting) raises too, at the same probe with the same error. Dynamo met eager's own view or its own fake's
# layout in the code after a graph break (fuzzer s905_15); no design below Dynamo that returns eager's views
# avoids it, only stock's unfaithful outputs do.
CRASH_AS_THE_CEILING = "crash where stock runs, as the ceiling does"
# The same for a divergence where stock matches: the ceiling, under the same setting, differs from eager at the same
# probe in the same way. Compiled autograd's second backward through eager's own CopySlices node hits an internal
# assert where eager raises "backward through the graph a second time" (fuzzer s1102_942): any design that returns
# eager's autograd graph meets it; stock's CompiledFunction node does not. A probe-level find (WRONG_ON_A_PROBE)
# the ceiling shares at that probe is reported so too (s1801_119, the same assert).
WRONG_AS_THE_CEILING = "wrong where stock matches, as the ceiling is"
# Reported apart from the invariant, compile_function only: a program where compile_function breaks a rule and
# stock's own counterpart of it, functorch's aot_function on the whole function (``stock_fn``, no Dynamo), fails
# the same way. compile_function captures one graph where Dynamo's graph breaks split the program, so AOTAutograd's
# one-graph choices meet it that the control's graph breaks avoided: the partitioner saving a returned input
# (s802_73), the compiled function's error naming CompiledFunction (s901_113), its refusal of a second backward
# (s904_194). Those are stock's, on the same graph; a failure stock_fn does not share stays in the invariant.
AS_STOCK_ONE_GRAPH = "fails as stock's one graph (aot_function) does"
APART_RULES = (CRASH_AS_THE_CEILING, WRONG_AS_THE_CEILING, AS_STOCK_ONE_GRAPH)


# "output 1 of CompiledFunction": the index counts the compiled function's outputs, which differ between two compiled
# forms of one program (compile_function's core and aot_function's whole graph), not what the error says.
_OUTPUT_INDEX = re.compile(r"\boutput \d+ of ")


def _first_line(message: str) -> str:
    return _OUTPUT_INDEX.sub("output _ of ", (message.splitlines() or [""])[0])


def fails_alike(mine: Outcome, theirs: Outcome | None) -> bool:
    """Both fail at the same probe and path: a crash with the same error type and first message line (up to the
    index of a compiled function's output it names), a divergence with the same observation."""
    if theirs is None or mine.kind == "match" or mine.kind != theirs.kind:
        return False
    if (mine.probe, mine.path) != (theirs.probe, theirs.path):
        return False
    a, b = mine.actual, theirs.actual
    if isinstance(a, Raised) and isinstance(b, Raised):
        return a.type == b.type and _first_line(a.message) == _first_line(b.message)
    return not isinstance(a, Raised) and not isinstance(b, Raised) and describe(a, 400) == describe(b, 400)


def crashes_as(prototype: Outcome, ceiling: Outcome | None) -> bool:
    """Both crash at the same probe and path with the same error type and first message line."""
    return prototype.kind == "crash" and fails_alike(prototype, ceiling)


def fails_as_stock_one_graph(program: Program, reference: Run, s: Strategy, outcome: Outcome) -> bool:
    """compile_function's failure is stock_fn's too (AS_STOCK_ONE_GRAPH); stock_fn runs only here, on failures."""
    if s.name != "prototype_fn" or s.inner != "aot_eager":
        return False
    return fails_alike(outcome, classify(reference, run_program(program, stock_fn(s.inner))))


def breaks(rule: str, prototype: Outcome, stock: Outcome) -> bool:
    if rule in (WRONG_WHERE_STOCK_MATCHES, WRONG_ON_A_PROBE):  # the latter on one probe's outcomes
        return prototype.kind != "match" and stock.kind == "match"
    return prototype.kind == "crash" and stock.kind != "crash"


INVARIANT_RULES = (WRONG_WHERE_STOCK_MATCHES, CRASH_WHERE_STOCK_RUNS)


def violated_rule(prototype: Outcome, stock: Outcome) -> str | None:
    return next((r for r in (WRONG_WHERE_STOCK_MATCHES, CRASH_WHERE_STOCK_RUNS) if breaks(r, prototype, stock)), None)


@dataclass
class Failure:
    """A prototype strategy violating a rule: wrong where stock matches eager, or crashing where stock runs."""

    program: Program
    label: str
    outcome: Outcome
    rule: str
    shrunk: Program | None = None
    shrunk_outcome: Outcome | None = None
    tried: int = 0


@dataclass
class FuzzResults:
    seed: int
    labels: list[str]
    programs: list[tuple[Program, dict[str, StrategyResult]]] = field(default_factory=list)
    dimensions: frozenset[str] = frozenset()
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0


def _stock_label(strategies: Sequence[Strategy], s: Strategy) -> str | None:
    """The control: stock with the same inner backend and the same setting."""
    return next(
        (t.label for t in strategies if t.name == "stock" and t.inner == s.inner and setting_of(t) == setting_of(s)),
        None,
    )


def is_prototype(s: Strategy) -> bool:
    return s.name.startswith("prototype")


def failure_predicate(
    reference: Strategy,
    subject: Strategy,
    control: Strategy | None,
    outcome: Outcome,
    eager_raises: bool,
    rule: str = WRONG_WHERE_STOCK_MATCHES,
) -> Callable[[Program], bool]:
    """True on programs where ``subject`` still fails like ``outcome`` (kind and probe) and ``control`` with it
    still violates ``rule``.

    Only the failing probe and forward are run. A candidate must raise in eager's forward iff the original did
    (deleting the statement that makes eager's output valid is no reproducer).
    """
    probes = tuple(dict.fromkeys(["forward", outcome.probe or "forward"]))

    def fails(candidate: Program) -> bool:
        ref = run_program(candidate, reference, probes)
        if isinstance(ref.observations["forward"], Raised) != eager_raises:
            return False
        got = classify(ref, run_program(candidate, subject, probes))
        if got.kind != outcome.kind or got.probe != outcome.probe:
            return False
        # See Note [Fuzz rules]: breaks(), not violated_rule() ==.
        return control is None or breaks(rule, got, classify(ref, run_program(candidate, control, probes)))

    return fails


def wrong_on_a_probe(
    reference: Run, prototype: Run, stock: Run, ceiling: Run | None = None
) -> tuple[Outcome, bool] | None:
    """The first probe where the prototype differs from eager and stock does not, and whether the ceiling differs
    there alike (WRONG_AS_THE_CEILING, on one probe); a probe the ceiling does not share comes first."""
    found = []
    for name in reference.observations:
        outcome = classify(reference, prototype, [name])
        if outcome.kind != "match" and classify(reference, stock, [name]).kind == "match":
            shared = ceiling is not None and fails_alike(outcome, classify(reference, ceiling, [name]))
            if not shared:
                return outcome, False
            found.append(outcome)
    return (found[0], True) if found else None


def fuzz(
    n: int,
    seed: int,
    strategies: Sequence[Strategy],
    *,
    do_shrink: bool = True,
    max_shrink_tests: int = 60,
    on_failure: Callable[[Failure], None] | None = None,
    progress: bool = False,
    start: int = 0,
    dimensions: frozenset[str] = frozenset(),
) -> FuzzResults:
    reference = next(s for s in strategies if s.inner is None)
    results = FuzzResults(seed, [s.label for s in strategies], dimensions=dimensions)
    began = time.perf_counter()
    for index in range(start, start + n):
        program = generate(seed, index, dimensions)
        applicable = [s for s in strategies if not setting_of(s) or setting_of(s) in program.settings]
        runs = {s.label: run_program(program, s) for s in applicable}
        row = {
            s.label: StrategyResult(
                classify(runs[reference.label], runs[s.label]),
                runs[s.label].fallbacks,
                runs[s.label].seconds,
                not isinstance(runs[s.label].observations.get("forward"), Raised),
            )
            for s in applicable
        }
        results.programs.append((program, row))
        for s in applicable:
            control = _stock_label(applicable, s)
            if not is_prototype(s) or control is None:
                continue
            outcome = row[s.label].outcome
            rule = violated_rule(outcome, row[control].outcome)
            ceiling = ceiling_label_for(s.label, row)
            ceiling_outcome = row[ceiling].outcome if ceiling else None
            if rule == CRASH_WHERE_STOCK_RUNS and crashes_as(outcome, ceiling_outcome):
                rule = CRASH_AS_THE_CEILING
            if rule == WRONG_WHERE_STOCK_MATCHES and fails_alike(outcome, ceiling_outcome):
                rule = WRONG_AS_THE_CEILING
            if rule in INVARIANT_RULES and fails_as_stock_one_graph(program, runs[reference.label], s, outcome):
                rule = AS_STOCK_ONE_GRAPH
            if rule is None:
                on_probe = wrong_on_a_probe(
                    runs[reference.label], runs[s.label], runs[control], runs.get(ceiling or "")
                )
                outcome = None if on_probe is None else on_probe[0]
                rule = None if on_probe is None else WRONG_AS_THE_CEILING if on_probe[1] else WRONG_ON_A_PROBE
            if rule is None or outcome is None:
                continue
            failure = Failure(program, s.label, outcome, rule)
            if do_shrink and rule not in APART_RULES:
                control_strategy = next(t for t in strategies if t.label == control)
                eager_raises = isinstance(runs[reference.label].observations["forward"], Raised)
                fails = failure_predicate(reference, s, control_strategy, outcome, eager_raises, rule)
                failure.shrunk, failure.tried = shrink(program, fails, max_shrink_tests)
                ref = run_program(failure.shrunk, reference)
                probes = [outcome.probe or "forward"] if rule == WRONG_ON_A_PROBE else None
                failure.shrunk_outcome = classify(ref, run_program(failure.shrunk, s), probes)
            results.failures.append(failure)
            if on_failure is not None:
                on_failure(failure)
        if progress:
            summary = " ".join(f"{label}={r.category}" for label, r in row.items() if label != reference.label)
            print(f"  [{index - start + 1}/{n}] {program.name}: {summary}", file=sys.stderr, flush=True)
    results.seconds = time.perf_counter() - began
    return results


# ---------------------------------------------------------------------------------------------------------
# Reports.
# ---------------------------------------------------------------------------------------------------------

COLUMNS = (
    "programs",  # the programs the strategy ran: each program runs under one setting of the new dimensions
    "match",
    "divergence",
    "crash",
    "fallback",
    "fallback_match",
    "wrong_where_stock_matches",
    "crash_where_stock_runs",
    "wrong_on_a_probe",
    "crash_as_the_ceiling",  # reported apart from the invariant: CRASH_AS_THE_CEILING
    "wrong_as_the_ceiling",  # reported apart from the invariant: WRONG_AS_THE_CEILING
    "as_stock_one_graph",  # reported apart from the invariant: AS_STOCK_ONE_GRAPH (compile_function only)
    "below_the_ceiling",  # diagnostics: differs from eager where the ceiling under the same setting matches
)


def summary(results: FuzzResults) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    wrong: dict[tuple[str, str], set[str]] = {}
    for f in results.failures:
        wrong.setdefault((f.label, f.rule), set()).add(f.program.name)
    for label in results.labels[1:]:
        counts = dict.fromkeys(COLUMNS, 0)
        for _, row in results.programs:
            r = row.get(label)
            if r is None:
                continue
            counts["programs"] += 1
            counts[r.category] += 1
            counts["fallback_match"] += bool(r.fallbacks) and r.outcome.kind == "match"
        counts["wrong_where_stock_matches"] = len(wrong.get((label, WRONG_WHERE_STOCK_MATCHES), ()))
        counts["crash_where_stock_runs"] = len(wrong.get((label, CRASH_WHERE_STOCK_RUNS), ()))
        counts["wrong_on_a_probe"] = len(wrong.get((label, WRONG_ON_A_PROBE), ()))
        counts["crash_as_the_ceiling"] = len(wrong.get((label, CRASH_AS_THE_CEILING), ()))
        counts["wrong_as_the_ceiling"] = len(wrong.get((label, WRONG_AS_THE_CEILING), ()))
        counts["as_stock_one_graph"] = len(wrong.get((label, AS_STOCK_ONE_GRAPH), ()))
        ceiling = ceiling_label_for(label, results.labels) if is_prototype_label(label) else None
        counts["below_the_ceiling"] = sum(
            ceiling is not None and is_below_the_ceiling(gap_result(row.get(label)), gap_result(row.get(ceiling)))
            for _, row in results.programs
        )
        table[label] = counts
    return table


def is_prototype_label(label: str) -> bool:
    return label.startswith("prototype")


def gap_result(r: StrategyResult | None) -> Result | None:
    if r is None:
        return None
    return Result(r.outcome.kind, r.outcome.probe, tuple(dict.fromkeys(r.fallbacks)))


def fuzz_gaps(results: FuzzResults) -> list[Gap]:
    """The gap to the ceiling per entry point, over the programs whose eager forward runs (ceiling.py)."""
    eager_label = results.labels[0]
    records = [
        {label: gap_result(r) for label, r in row.items() if label != eager_label}
        for _, row in results.programs
        if row[eager_label].forward_runs
    ]
    return gaps(records, results.labels)


def markdown(results: FuzzResults) -> str:
    n = len(results.programs)
    rate = n / results.seconds * 60 if results.seconds else 0.0
    lines = [
        f"## Differential fuzzing: {n} programs, seed {results.seed}",
        "",
        stock_version_line(),
        "",
        f"Every probe of the parity suite plus `after_call` and `sharing`; {results.seconds:.0f} s "
        f"({rate:.0f} programs/minute, shrinking included). `fallback` programs are not counted in match/"
        "divergence/crash; `fallback_match` is how many of them still matched eager. "
        "`wrong_where_stock_matches`: the strategy diverges or crashes on a program where stock matches eager; "
        "`crash_where_stock_runs`: it crashes where stock does not (stock may diverge); these two are issue 9's "
        "invariant. `crash_as_the_ceiling`, apart from it: a crash where stock runs that the ceiling raises too, at "
        "the same probe with the same error (Dynamo's own); `wrong_as_the_ceiling`, the same for a divergence where "
        "stock matches. `as_stock_one_graph`, apart from it too: a "
        "compile_function program breaking the invariant where stock's own counterpart, `aot_function` on the whole "
        "function, fails the same way. `wrong_on_a_probe` (diagnostics): on the other "
        "programs, some probe where the strategy differs from eager while stock does not. `below_the_ceiling` "
        "(diagnostics): the strategy differs from eager where the ceiling (`dynamo_eager`, Dynamo with "
        '`backend="eager"`) under the same setting matches.',
        "",
        dimensions_paragraph(results.dimensions),
        "",
        "| strategy | " + " | ".join(COLUMNS) + " |",
        "|---|" + "---:|" * len(COLUMNS),
    ]
    lines += table_lines(summary(results), (r.fallbacks for _, row in results.programs for r in row.values()))
    if gap := gap_markdown(fuzz_gaps(results), "programs"):
        lines += ["", *gap]
    if results.dimensions:
        rules = {(f.program.name, f.label): f.rule for f in results.failures if f.rule in INVARIANT_RULES}
        records = [
            (
                program_features(program),
                {label: (r.outcome.kind, rules.get((program.name, label))) for label, r in row.items()},
            )
            for program, row in results.programs
        ]
        lines += ["", *features_table(records, results.labels[1:])]
    for rule in (*INVARIANT_RULES, *APART_RULES, WRONG_ON_A_PROBE):
        failures = [f for f in results.failures if f.rule == rule]
        lines += ["", f"### Prototype {rule}: {len(failures)}", ""]
        for f in failures:
            lines += failure_markdown(f)
    return "\n".join(lines) + "\n"


def dimensions_paragraph(dimensions: frozenset[str]) -> str:
    """What the programs and strategy labels mean under ``--fuzz-dimensions``."""
    if not dimensions:
        return (
            "Dimensions: `classic` (the classic generator; every compiled strategy with `dynamic=False`, one call "
            "per probe)."
        )
    return (
        f"Dimensions: `{dimensions_text(dimensions)}` (Note [Fuzz dimensions]). A label without a setting is "
        "`torch.compile`'s default, `dynamic=None` (static, then automatic dynamic when a later call brings other "
        "sizes); `[inner,dynamic]` is `dynamic=True`; `[inner,compiled_autograd]` has compiled autograd on around "
        "compiling and every probe (its graph compiled by the same backend). Each setting's control is stock under "
        "the same setting; each program runs under one setting (drawn per program) besides the default, so the "
        "`programs` column differs. Eager, and every strategy, makes each call under the program's grad mode "
        "(`no_grad`/`inference_mode` programs); programs with other sizes are observed by every probe on each of "
        "their three calls of the same compiled function (`<probe>@call2`, `@call3`)."
    )


def program_features(program: Program) -> list[str]:
    """Which of the new dimensions a program has (for the per-dimension table)."""
    source = program.source()
    found = []
    if "out=(" in source:
        found.append("multi-output out=")
    if "out=" in source.replace("out=(", ""):
        found.append("out=")
    found += [
        label
        for name, label in (("k", "int input"), ("xs", "list input"), ("opt", "None input"))
        if name in program.inputs
    ]
    if any(name == "n" for name, _ in program.params):
        found.append("other sizes")
    if program.calls and any(name == "k" for name, _ in program.params):
        found.append("int varies (SymInt)")
    if program.call_mode:
        found.append(f"called under {program.call_mode}")
    return found or ["none of the new dimensions"]


def features_table(
    records: Sequence[tuple[Sequence[str], dict[str, tuple[str, str | None]]]], labels: Sequence[str]
) -> list[str]:
    """Per program dimension: how many programs have it, and per strategy how many of those match eager (a
    fallback that matched counts) / break the invariant (wrong where stock matches, crash where stock runs)."""
    by_feature: dict[str, list[dict[str, tuple[str, str | None]]]] = {}
    for features, row in records:
        for feature in features:
            by_feature.setdefault(feature, []).append(row)
    lines = [
        "Per program dimension, each strategy's `matched/ran (broke the invariant)`: a program counts under each "
        "dimension it has; `matched` includes fallbacks that matched eager.",
        "",
        "| dimension | programs | " + " | ".join(labels) + " |",
        "|---|---:|" + "---:|" * len(labels),
    ]
    for feature, rows in sorted(by_feature.items(), key=lambda item: -len(item[1])):
        cells = []
        for label in labels:
            ran = [row[label] for row in rows if label in row]
            matched = sum(kind == "match" for kind, _ in ran)
            broken = sum(rule is not None for _, rule in ran)
            cells.append(f"{matched}/{len(ran)} ({broken})")
        lines.append(f"| {feature} | {len(rows)} | " + " | ".join(cells) + " |")
    return lines


def table_lines(counts: dict[str, dict[str, int]], fallbacks: Iterable[Sequence[str]]) -> list[str]:
    """The summary table's rows, then how often each fallback reason was logged (once per program and strategy)."""
    lines = [f"| {label} | " + " | ".join(str(c[k]) for k in COLUMNS) + " |" for label, c in counts.items()]
    reasons = collections.Counter(reason for reasons in fallbacks for reason in dict.fromkeys(reasons))
    if reasons:
        lines += ["", "Fallback reasons (programs x strategies):", ""]
        lines += [f"- {count} x {reason}" for reason, count in reasons.most_common()]
    return lines


def failure_markdown(f: Failure) -> list[str]:
    shown = f.shrunk or f.program
    outcome = f.shrunk_outcome or f.outcome
    title = f"{f.program.name} under {f.label}: {f.rule}"
    if f.shrunk is not None:
        title += f" (shrunk from {len(f.program.body)} to {len(shown.body)} statements in {f.tried} tries)"
    return [f"#### {title}", "", f"- {outcome.describe()}", "", "```python", shown.source().rstrip(), "```", ""]


def write_csv(results: FuzzResults, path: Path) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "seed",
                "program",
                "strategy",
                "category",
                "outcome",
                "probe",
                "fallback",
                "seconds",
                "eager_forward_runs",
                "below_the_ceiling",
            ]
        )
        for program, row in results.programs:
            eager_runs = row[results.labels[0]].forward_runs
            for label, r in row.items():
                ceiling = ceiling_label_for(label, row) if is_prototype_label(label) else None
                below = ceiling is not None and is_below_the_ceiling(gap_result(r), gap_result(row.get(ceiling)))
                writer.writerow(
                    [
                        results.seed,
                        program.name,
                        label,
                        r.category,
                        r.outcome.kind,
                        r.outcome.probe or "",
                        "; ".join(dict.fromkeys(r.fallbacks)),
                        f"{r.seconds:.3f}",
                        int(eager_runs),
                        int(below),
                    ]
                )


def text_table(results: FuzzResults) -> str:
    width = max(len(label) for label in results.labels)
    lines = [f"{'strategy':<{width}}  " + "  ".join(f"{c:>10}" for c in COLUMNS)]
    for label, counts in summary(results).items():
        lines.append(f"{label:<{width}}  " + "  ".join(f"{counts[c]:>{max(10, len(c))}}" for c in COLUMNS))
    return "\n".join(lines)


def run_fuzz_section(args: argparse.Namespace, out_dir: Path) -> str:
    """What ``compare --fuzz N`` runs: print the table and shrunk failures, write fuzz.md and fuzz.csv."""
    dimensions = getattr(args, "fuzz_dimensions", frozenset())
    strategies = strategy_set(args.inners, dimensions)
    print(
        f"fuzz: {args.fuzz} programs (seed {args.seed}, dimensions {dimensions_text(dimensions)}) x "
        f"{len(strategies)} strategies",
        flush=True,
    )
    failures_path = out_dir / "fuzz_failures.md"
    failures_path.write_text("")

    def report_failure(f: Failure) -> None:
        text = "\n".join(failure_markdown(f))
        print(text, flush=True)
        with failures_path.open("a") as fh:
            fh.write(text + "\n")

    results = fuzz(args.fuzz, args.seed, strategies, on_failure=report_failure, progress=True, dimensions=dimensions)
    text = markdown(results)
    (out_dir / "fuzz.md").write_text(text)
    write_csv(results, out_dir / "fuzz.csv")
    print(text_table(results))
    if found := fuzz_gaps(results):
        print(f"\nGap to the ceiling (programs whose eager forward runs)\n\n{gap_text(found)}")
    print(f"fuzz: {results.seconds:.0f} s; wrote {out_dir / 'fuzz.md'} and {out_dir / 'fuzz.csv'}")
    return text
