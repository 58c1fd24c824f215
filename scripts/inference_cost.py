"""Inference cost (grad off): forward time of the comparison's workloads under ``torch.no_grad()`` (issue 25).

Run from the repository root::

    python scripts/inference_cost.py [--inner aot_eager,inductor] [--runs 3] [--output FILE]

Each workload is compiled under ``no_grad`` (Dynamo guards on grad mode, so this is its own compiled graph, with no
backward traced) by eager, Dynamo's floor (``backend="eager"``), stock and the prototype, then its forward is timed
in interleaved rounds (best block of ``Timer.blocked_autorange``, process CPU time, one thread). A run compiles
afresh; cells are the median over runs, ratios the median of the per-run ratios with their range.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

from predispatch_views.compare.strategies import Strategy, dynamo_eager, eager, prototype, stock
from predispatch_views.compare.timing import (
    benchmark_environment,
    best_of_interleaved_rounds,
    fresh_copy,
    median_and_range,
    write_results,
)
from predispatch_views.compare.workloads import Workload, deep_mlp, kjt, qkv, seed, single_view

WORKLOADS: dict[str, Callable[[], Workload]] = {
    "seed N=50": lambda: seed(50),
    "seed N=1000": lambda: seed(1000),
    "qkv": qkv,
    "kjt": lambda: kjt(256, 32, 16),
    "deep_mlp": lambda: deep_mlp(40),
    "single_view": single_view,
}


def one_run(workload: Callable[[], Workload], strategies: dict[str, Strategy], rounds: int) -> dict[str, float]:
    torch._dynamo.reset()
    forwards = {}
    with torch.no_grad():
        for label, strategy in strategies.items():
            instance = workload().instantiate(lambda fn, s=strategy: s.make(fresh_copy(fn)), torch.device("cpu"))
            for _ in range(3):  # compile, then warm
                instance.forward()
            forwards[label] = instance.forward
        return best_of_interleaved_rounds(forwards, rounds, 0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inner", default="aot_eager,inductor")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    lines = [
        f"Forward under `torch.no_grad()`, compiled under it; torch {torch.__version__}, CPU, one thread; "
        f"{args.runs} runs x {args.rounds} interleaved rounds, process CPU time. Cells: median over runs (us); "
        'ratios: median of the per-run ratios (min-max). floor: `torch.compile(backend="eager")`.',
        "",
        "| inner | workload | eager | floor | stock | prototype | prototype / stock | prototype / floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with benchmark_environment():
        for inner in args.inner.split(","):
            strategies = {"eager": eager(), "floor": dynamo_eager(), "stock": stock(inner)}
            strategies["prototype"] = prototype(inner)
            for name, workload in WORKLOADS.items():
                runs = [one_run(workload, strategies, args.rounds) for _ in range(args.runs)]
                cells = [inner, name]
                cells += [f"{statistics.median(r[label] for r in runs) * 1e6:.0f}" for label in strategies]
                ratios = ([r["prototype"] / r[to] for r in runs] for to in ("stock", "floor"))
                cells += [median_and_range(rs, bold=True) for rs in ratios]
                lines.append("| " + " | ".join(cells) + " |")
                print(lines[-1], flush=True)
    write_results(lines, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
