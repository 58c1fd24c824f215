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
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import pipeline
from .fuzz_program import Program, generate, shrink
from .parity import _isolated
from .probes import PROBES, Call, Raised, Subject, attempt, describe, differences
from .report import stock_version_line
from .strategies import Strategy, eager, prototype, prototype_fn, stock

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


def fuzz_strategies(inner: str) -> list[Strategy]:
    return [eager(), stock(inner), prototype(inner), prototype_fn(inner)]


def _seeded(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        torch.manual_seed(RNG_SEED)  # outside the compiled function: every call draws the same numbers
        return fn(*args)

    return run


@dataclass
class Run:
    observations: dict[str, Any]
    fallbacks: list[str]
    seconds: float


def run_program(program: Program, strategy: Strategy, probes: Sequence[str] = tuple(FUZZ_PROBES)) -> Run:
    torch._dynamo.reset()
    pipeline.FALLBACKS.clear()
    start = time.perf_counter()
    observations: dict[str, Any] = {}
    # AOTAutograd traces the backward under anomaly mode: eager errors in it would print a warning each.
    with _isolated(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case = program.case()
        made = attempt(lambda: strategy.make(case.fn))
        subject = None if isinstance(made, Raised) else Subject(_seeded(made), case, "cpu")
        for name in probes:
            if subject is None:
                observations[name] = made
                continue
            observations[name] = attempt(lambda name=name: FUZZ_PROBES[name](subject.call))
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


def breaks(rule: str, prototype: Outcome, stock: Outcome) -> bool:
    if rule in (WRONG_WHERE_STOCK_MATCHES, WRONG_ON_A_PROBE):  # the latter on one probe's outcomes
        return prototype.kind != "match" and stock.kind == "match"
    return prototype.kind == "crash" and stock.kind != "crash"


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
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0


def _stock_label(strategies: Sequence[Strategy], s: Strategy) -> str | None:
    return next((t.label for t in strategies if t.name == "stock" and t.inner == s.inner), None)


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


def wrong_on_a_probe(reference: Run, prototype: Run, stock: Run) -> Outcome | None:
    for name in reference.observations:
        outcome = classify(reference, prototype, [name])
        if outcome.kind != "match" and classify(reference, stock, [name]).kind == "match":
            return outcome
    return None


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
) -> FuzzResults:
    reference = next(s for s in strategies if s.inner is None)
    results = FuzzResults(seed, [s.label for s in strategies])
    began = time.perf_counter()
    for index in range(start, start + n):
        program = generate(seed, index)
        runs = {s.label: run_program(program, s) for s in strategies}
        row = {
            s.label: StrategyResult(
                classify(runs[reference.label], runs[s.label]), runs[s.label].fallbacks, runs[s.label].seconds
            )
            for s in strategies
        }
        results.programs.append((program, row))
        for s in strategies:
            control = _stock_label(strategies, s)
            if not is_prototype(s) or control is None:
                continue
            outcome = row[s.label].outcome
            rule = violated_rule(outcome, row[control].outcome)
            if rule is None:
                outcome = wrong_on_a_probe(runs[reference.label], runs[s.label], runs[control])
                rule = None if outcome is None else WRONG_ON_A_PROBE
            if rule is None or outcome is None:
                continue
            failure = Failure(program, s.label, outcome, rule)
            if do_shrink:
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
    "match",
    "divergence",
    "crash",
    "fallback",
    "fallback_match",
    "wrong_where_stock_matches",
    "crash_where_stock_runs",
    "wrong_on_a_probe",
)


def summary(results: FuzzResults) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    wrong: dict[tuple[str, str], set[str]] = {}
    for f in results.failures:
        wrong.setdefault((f.label, f.rule), set()).add(f.program.name)
    for label in results.labels[1:]:
        counts = dict.fromkeys(COLUMNS, 0)
        for _, row in results.programs:
            r = row[label]
            counts[r.category] += 1
            counts["fallback_match"] += bool(r.fallbacks) and r.outcome.kind == "match"
        counts["wrong_where_stock_matches"] = len(wrong.get((label, WRONG_WHERE_STOCK_MATCHES), ()))
        counts["crash_where_stock_runs"] = len(wrong.get((label, CRASH_WHERE_STOCK_RUNS), ()))
        counts["wrong_on_a_probe"] = len(wrong.get((label, WRONG_ON_A_PROBE), ()))
        table[label] = counts
    return table


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
        "invariant. `wrong_on_a_probe` (diagnostics): on the other programs, some probe where the strategy differs "
        "from eager while stock does not.",
        "",
        "| strategy | " + " | ".join(COLUMNS) + " |",
        "|---|" + "---:|" * len(COLUMNS),
    ]
    lines += table_lines(summary(results), (r.fallbacks for _, row in results.programs for r in row.values()))
    for rule in (WRONG_WHERE_STOCK_MATCHES, CRASH_WHERE_STOCK_RUNS, WRONG_ON_A_PROBE):
        failures = [f for f in results.failures if f.rule == rule]
        lines += ["", f"### Prototype {rule}: {len(failures)}", ""]
        for f in failures:
            lines += failure_markdown(f)
    return "\n".join(lines) + "\n"


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
        writer.writerow(["seed", "program", "strategy", "category", "outcome", "probe", "fallback", "seconds"])
        for program, row in results.programs:
            for label, r in row.items():
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
    strategies = [eager()]
    for inner in args.inners:
        strategies += fuzz_strategies(inner)[1:]
    print(f"fuzz: {args.fuzz} programs (seed {args.seed}) x {len(strategies)} strategies", flush=True)
    failures_path = out_dir / "fuzz_failures.md"
    failures_path.write_text("")

    def report_failure(f: Failure) -> None:
        text = "\n".join(failure_markdown(f))
        print(text, flush=True)
        with failures_path.open("a") as fh:
            fh.write(text + "\n")

    results = fuzz(args.fuzz, args.seed, strategies, on_failure=report_failure, progress=True)
    text = markdown(results)
    (out_dir / "fuzz.md").write_text(text)
    write_csv(results, out_dir / "fuzz.csv")
    print(text_table(results))
    print(f"fuzz: {results.seconds:.0f} s; wrote {out_dir / 'fuzz.md'} and {out_dir / 'fuzz.csv'}")
    return text
