"""The seed program of pytorch PR #111411 under every strategy: forward and backward cost, views, autograd nodes.

Run from the repository root::

    python scripts/seed_measurement.py --sizes 50,500 --runs 3 --output results/seed-measurement.md

design/01's table quotes the file this writes (doc_figures). Strategies, each compiled on its own copy of ``seed``
in one process: eager; stock (the unsafe fix); stock with the fix switched off (``stock_no_fix``); the
``as_strided`` regeneration before the fix (``legacy_as_strided``); the prototype. Each run compiles afresh, times
every strategy's forward and backward (the PR's driver, ``sum(outs).sum().backward()``) in interleaved rounds of
process CPU time with one thread, and keeps each strategy's median step; cells are the median over runs, with the
forward+backward range over runs. "first call" is the CPU time of the compiling call.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from predispatch_views.compare.strategies import Strategy, eager, legacy_as_strided, prototype, stock, stock_no_fix
from predispatch_views.compare.timing import benchmark_environment, cpu_seconds, fresh_copy, provenance, write_results


def seed(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    intermediate = x.mul(2)
    return intermediate.unbind(0)


def node_counts(outs: tuple[torch.Tensor, ...]) -> dict[str, int]:
    counts: collections.Counter[str] = collections.Counter()
    seen, stack = set(), [o.grad_fn for o in outs]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if type(fn).__name__ != "AccumulateGrad":
            counts[type(fn).__name__] += 1
        stack.extend(f for f, _ in fn.next_functions)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def step(f: Callable[..., Any], x: torch.Tensor) -> tuple[Any, float, float]:
    x.grad = None
    t0 = time.process_time()
    outs = f(x)
    t1 = time.process_time()
    sum(outs).sum().backward()
    return outs, t1 - t0, time.process_time() - t1


def one_run(strategies: dict[str, Strategy], n: int, rounds: int) -> dict[str, dict[str, Any]]:
    torch._dynamo.reset()
    x = torch.randn(n, n, requires_grad=True)
    fns, found = {}, {}
    for label, s in strategies.items():
        fns[label] = s.make(fresh_copy(seed))
        start = cpu_seconds()
        outs, _, _ = step(fns[label], x)
        found[label] = {
            "first": cpu_seconds() - start,
            "views": sum(o._is_view() for o in outs),
            "nodes": node_counts(outs),
        }
        for _ in range(2):
            step(fns[label], x)
    times: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for r in range(rounds):
        labels = list(fns)[r % len(fns) :] + list(fns)[: r % len(fns)]
        for label in labels:
            _, forward, backward = step(fns[label], x)
            times[label].append((forward, backward))
    for label, pairs in times.items():
        found[label]["forward"] = statistics.median(p[0] for p in pairs)
        found[label]["backward"] = statistics.median(p[1] for p in pairs)
        found[label]["total"] = statistics.median(p[0] + p[1] for p in pairs)
    return found


def _median_ratio(runs: list[dict[str, dict[str, Any]]], label: str, other: str) -> float:
    return statistics.median(r[label]["total"] / r[other]["total"] for r in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50,500")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", default="50:60,500:15", help="rounds per run, per size (N:rounds,...)")
    parser.add_argument("--inner", default="aot_eager")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    rounds = {int(n): int(r) for n, r in (item.split(":") for item in args.rounds.split(","))}
    strategies = {
        "eager": eager(),
        "stock": stock(args.inner),
        "stock_no_fix": stock_no_fix(args.inner),
        "legacy_as_strided": legacy_as_strided(args.inner),
        "prototype": prototype(args.inner),
    }
    command = "python scripts/seed_measurement.py " + " ".join(sys.argv[1:])
    per_size = ", ".join(f"{r} interleaved rounds at N={n}" for n, r in rounds.items())
    lines = [
        "# The seed program under every strategy",
        "",
        provenance(command),
        "",
        f"`x.mul(2).unbind(0)` with x (N, N), forward (`f(x)`) and backward (`sum(outs).sum().backward()`, the PR's "
        f"driver) in milliseconds of process CPU time, one thread, inner `{args.inner}`. Each cell is the median "
        f"over {args.runs} runs of each run's median step ({per_size}); "
        "range: forward+backward over runs; x eager, x stock: median over runs of the run's ratio. First call: CPU "
        "seconds of the compiling call.",
        "",
        "## Medians",
        "",
        "| outputs | strategy | forward | backward | fwd+bwd | range | x eager | x stock | first call (s) "
        "| outputs that are views | autograd nodes (AccumulateGrad excluded) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    with benchmark_environment():
        stock(args.inner).make(fresh_copy(seed))(torch.randn(2, 2, requires_grad=True))  # Dynamo's one-time start
        for n in (int(s) for s in args.sizes.split(",")):
            runs = [one_run(strategies, n, rounds.get(n, 15)) for _ in range(args.runs)]
            for label in strategies:
                cells = [r[label] for r in runs]
                totals = [c["total"] * 1e3 for c in cells]
                nodes = ", ".join(f"{k} {v}" for k, v in cells[0]["nodes"].items())
                ratio = {other: _median_ratio(runs, label, other) for other in ("eager", "stock")}
                lines.append(
                    f"| {n} | {label} | {statistics.median(c['forward'] * 1e3 for c in cells):.2f} | "
                    f"{statistics.median(c['backward'] * 1e3 for c in cells):.2f} | "
                    f"{statistics.median(totals):.2f} | {min(totals):.2f}-{max(totals):.2f} | "
                    f"{ratio['eager']:.2f} | {ratio['stock']:.2f} | "
                    f"{statistics.median(c['first'] for c in cells):.2f} | {cells[0]['views']}/{n} | {nodes} |"
                )
                print(lines[-1], flush=True)
    write_results(lines, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
