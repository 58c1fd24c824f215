"""The eager-parity suite: every case under every strategy, every probe compared with eager.

For each case and strategy: ``torch._dynamo.reset()``, make the callable, run every probe on fresh calls, count
the autograd nodes reachable from the outputs, and (prototype) collect the fallbacks it logged. Nothing a
strategy does (raising at compile or at run time) stops the harness: it is recorded and compared with eager.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import io
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import torch

from .. import pipeline
from . import report
from .cases import Case, by_name, select_cases
from .cases_upstream import PREFIX as UPSTREAM_PREFIX
from .parity_results import CaseRun, Divergence, ParityResults
from .probes import PROBES, Raised, Subject, attempt, autograd_nodes, first_difference
from .strategies import Strategy, is_ceiling, parity_strategies

# --quick: every case under aot_eager; inductor (slow to compile on 2 CPUs) only on these. unbind_then_detach
# is there because it diverges under inductor only (outputs that alias without being views).
QUICK_INDUCTOR_CASES = (
    "unbind_dim0",
    "mutate_intermediate_after",
    "intermediate_with_views",
    "module_linear_chunk_qkv",
    "unbind_then_detach",
)


@contextlib.contextmanager
def _isolated() -> Iterator[None]:
    """Quiet logs, and no AOTAutograd cache.

    Fallback reasons are read from FALLBACKS; Dynamo's recompile and graph-break chatter is not the report. The
    AOTAutograd cache keys an artifact by its graph, not by the patches stock_no_fix and legacy_as_strided apply
    while compiling: with it on, those strategies replay stock's cached artifact under inductor.
    """
    loggers = [logging.getLogger(n) for n in ("predispatch_views", "torch._dynamo", "torch._inductor")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with torch._functorch.config.patch(enable_autograd_cache=False):
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def run_case(case: Case, strategy: Strategy, device: str = "cpu") -> CaseRun:
    """Every probe of one case under one strategy (not yet compared with eager)."""
    torch._dynamo.reset()
    pipeline.FALLBACKS.clear()
    result = CaseRun(case, strategy)
    start = time.perf_counter()
    with _isolated():
        program = attempt(lambda: strategy.make(case.program(device)))
        for name, probe in PROBES.items():
            if isinstance(program, Raised):
                result.observations[name] = program
                continue
            result.observations[name] = attempt(lambda probe=probe: probe(Subject(program, case, device).call))
        result.nodes = program if isinstance(program, Raised) else autograd_nodes(Subject(program, case, device))
    result.fallbacks = list(pipeline.FALLBACKS)
    result.seconds = time.perf_counter() - start
    torch._dynamo.reset()
    return result


def compare(reference: CaseRun, run: CaseRun) -> None:
    """Fill ``run.divergences`` against eager's run of the same case."""
    for name in PROBES:
        diff = first_difference(reference.observations[name], run.observations[name])
        run.divergences[name] = None if diff is None else Divergence(*diff)


# What a worker process sends back for one case under one strategy (Case and Strategy hold lambdas).
_Record = tuple[str, dict[str, Any], Any, list[tuple[str, str]], float]
# The label of a record that stands for a harness failure of the whole case (a dead worker, a program that
# could not be built for eager); its "observations" slot holds the reason.
_NOT_RUN = "<not run>"


def _run_case_group(case_name: str, labels: Sequence[str], inners: tuple[str, ...], device: str) -> list[_Record]:
    """One case under several strategies; runs in a worker process, so it takes and returns names."""
    case = by_name(case_name)
    strategies = {s.label: s for s in parity_strategies(inners)}
    eager = next(s for s in strategies.values() if s.inner is None)
    built = attempt(lambda: eager.make(case.program(device)))
    if isinstance(built, Raised):
        return [(_NOT_RUN, {"reason": f"eager's program could not be built: {built}"}, None, [], 0.0)]
    records = []
    for label in labels:
        r = run_case(case, strategies[label], device)
        records.append((label, _detached(r.observations), r.nodes, r.fallbacks, r.seconds))
    return records


def _detached(observation: Any) -> Any:
    """Detached CPU copies of every tensor: an observation must cross a process boundary."""
    if isinstance(observation, torch.Tensor):
        return observation.detach().cpu()
    if isinstance(observation, dict):
        return {k: _detached(v) for k, v in observation.items()}
    if isinstance(observation, (list, tuple)):
        return type(observation)(_detached(v) for v in observation)
    return observation


def _run_case_group_in_worker(case_name: str, labels: Sequence[str], inners: tuple[str, ...], device: str) -> bytes:
    # Plain bytes, not pickled tensors: torch's reductions would put every tensor in shared memory (one file
    # descriptor each), and thousands of them kill workers abruptly.
    buffer = io.BytesIO()
    torch.save(_run_case_group(case_name, labels, inners, device), buffer)
    return buffer.getvalue()


def _init_worker(threads: int) -> None:
    faulthandler.enable()  # a worker that dies in native code says where
    torch.set_num_threads(threads)  # the workers share the cores


def default_jobs() -> int:
    value = os.environ.get("PREDISPATCH_VIEWS_PARITY_JOBS")
    return int(value) if value else min(4, os.cpu_count() or 1)


def run_parity(
    cases: Sequence[Case],
    strategies: Sequence[Strategy],
    device: str = "cpu",
    *,
    only: dict[str, set[str]] | None = None,
    jobs: int = 1,
    progress: bool = False,
) -> ParityResults:
    """Run and compare. ``only`` restricts a strategy label to some case names (quick mode's inductor).

    ``jobs > 1`` spreads the cases over spawned worker processes: compiling dominates and is single-threaded.
    """
    eager = next(s for s in strategies if s.inner is None)
    by_label = {s.label: s for s in strategies}
    inners = tuple(dict.fromkeys(s.inner for s in strategies if s.inner is not None and not is_ceiling(s)))
    groups = {
        case.name: [s.label for s in strategies if not (only and s.label in only and case.name not in only[s.label])]
        for case in cases
    }
    start = time.perf_counter()
    records: dict[str, list[_Record]] = {}
    if jobs <= 1:
        for k, case in enumerate(cases):
            try:
                records[case.name] = _run_case_group(case.name, groups[case.name], inners, device)
            except Exception as e:  # the harness itself failed on this case: it is marked, the others still run
                records[case.name] = [(_NOT_RUN, {"reason": f"the harness failed: {Raised.of(e)}"}, None, [], 0.0)]
            if progress:
                print(f"  [{k + 1}/{len(cases)}] {case.name}", file=sys.stderr, flush=True)
    else:
        threads = max(1, (os.cpu_count() or 1) // jobs)
        context = multiprocessing.get_context("spawn")  # fork after torch has started threads can hang
        with ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker, initargs=(threads,)) as pool:
            futures = {
                pool.submit(_run_case_group_in_worker, case.name, groups[case.name], inners, device): case.name
                for case in sorted(cases, key=lambda c: -len(groups[c.name]))
            }
            for k, future in enumerate(as_completed(futures)):
                name = futures[future]
                try:
                    records[name] = torch.load(io.BytesIO(future.result()), weights_only=False)
                except Exception as e:  # a crashed worker is recorded, not a crash of the harness
                    reason = f"the worker running it failed: {Raised.of(e)}"
                    records[name] = [(_NOT_RUN, {"reason": reason}, None, [], 0.0)]
                if progress:
                    print(f"  [{k + 1}/{len(cases)}] {name}", file=sys.stderr, flush=True)

    runs: dict[tuple[str, str], CaseRun] = {}
    eager_not_run: dict[str, str] = {}
    for case in cases:
        if records[case.name] and records[case.name][0][0] == _NOT_RUN:
            eager_not_run[case.name] = records[case.name][0][1]["reason"]
            continue
        made = {
            label: CaseRun(case, by_label[label], obs, nodes, fallbacks, seconds=seconds)
            for label, obs, nodes, fallbacks, seconds in records[case.name]
        }
        reference = made[eager.label]
        for label in (s.label for s in strategies):
            if label in made:
                compare(reference, made[label])
                runs[case.name, label] = made[label]
    return ParityResults(list(cases), list(strategies), runs, time.perf_counter() - start, eager_not_run)


def plan(args: argparse.Namespace) -> tuple[list[Case], list[Strategy], dict[str, set[str]]]:
    """Cases, strategies, and per-strategy case restrictions for the CLI's arguments."""
    inners = tuple(args.inners)
    cases = select_cases(slow=bool(getattr(args, "slow", False)), pattern=getattr(args, "cases", None))
    strategies = parity_strategies(inners)
    only: dict[str, set[str]] = {}
    if getattr(args, "quick", False):
        # The ported upstream programs are many and mostly repeat the library's patterns: --quick keeps their
        # fast subset only.
        cases = [c for c in cases if c.fast or not c.name.startswith(UPSTREAM_PREFIX)]
        for s in strategies:
            if s.inner not in (None, "aot_eager") and not is_ceiling(s):  # the ceiling compiles nothing: every case
                only[s.label] = set(QUICK_INDUCTOR_CASES)
    return cases, strategies, only


def run_parity_section(args: argparse.Namespace, out_dir: Path) -> str:
    """What ``compare`` runs: print the tables, write parity.md and parity.csv, return the Markdown section."""
    cases, strategies, only = plan(args)
    print(f"parity: {len(cases)} cases x {len(strategies)} strategies on {args.device}", flush=True)
    results = run_parity(cases, strategies, args.device, only=only, jobs=default_jobs(), progress=True)
    print(report.text_table(results))
    print(report.text_fallbacks(results))
    only_divergences = report.DivergenceFilter(
        getattr(args, "divergence_strategy", None), getattr(args, "divergence_case", None)
    )
    if getattr(args, "show_divergences", False):
        print(report.text_divergences(results, only_divergences))
    markdown = report.markdown(
        results, show_divergences=bool(getattr(args, "show_divergences", False)), only=only_divergences
    )
    (out_dir / "parity.md").write_text(markdown)
    report.write_csv(results, out_dir / "parity.csv")
    print(f"parity: {results.seconds:.0f} s; wrote {out_dir / 'parity.md'} and {out_dir / 'parity.csv'}")
    if results.eager_not_run:
        args.incomplete = [*getattr(args, "incomplete", []), f"eager did not run on {len(results.eager_not_run)} cases"]
    return markdown
