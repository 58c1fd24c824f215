"""The seed program of pytorch PR #111411: per-call cost against Dynamo's floor, eager and stock (issue 24).

Run from the repository root::

    python scripts/seed_ratios.py --sizes 50,500,1000 --runs 5 [--inner aot_eager] [--output FILE]

Strategies, each compiled on its own copy of ``seed`` in one process: eager; Dynamo's floor (``torch.compile`` with
``backend="eager"``: Dynamo's guards and bytecode, nothing compiled below it); stock (``backend=inner``); the
prototype (the backend with ``inner`` inside). Each run times every strategy's forward+backward in interleaved
rounds (best block of ``Timer.blocked_autorange`` per strategy over the rounds, process CPU time, one thread);
the table gives, per N, the median over runs of each run's ratios, with their range. A run compiles afresh.
"""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Callable
from pathlib import Path

import torch

from predispatch_views.compare.strategies import Strategy, dynamo_eager, eager, prototype, stock
from predispatch_views.compare.timing import best_of_interleaved_rounds, median_and_range, provenance, write_results


def seed(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    intermediate = x.mul(2)
    return intermediate.unbind(0)


def _fresh(fn: Callable[..., object]) -> Callable[..., object]:
    # A new code object per strategy, so Dynamo cache entries of one strategy never serve another.
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__)


def core(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (x.mul(2),)  # the seed's core alone: what the inner backend compiles of it


def _step(strategy: Strategy, n: int, program: Callable[..., tuple[torch.Tensor, ...]] = seed) -> Callable[[], None]:
    fn = strategy.make(_fresh(program))
    x = torch.randn(n, 256, requires_grad=True)

    def step() -> None:
        outs = fn(x)
        torch.autograd.backward([o.sum() for o in outs])
        x.grad = None

    for _ in range(3):  # compile, then warm
        step()
    return step


def one_run(strategies: dict[str, Strategy], n: int, rounds: int, min_run_time: float) -> dict[str, float]:
    """Best seconds per forward+backward of each strategy over interleaved rounds."""
    torch._dynamo.reset()
    steps = {label: _step(s, n) for label, s in strategies.items()}
    # The inner backend's own per-call cost: the core alone under the inner backend, against the core alone under
    # the floor (the same Dynamo frame and guards, nothing compiled).
    steps["core floor"] = _step(strategies["floor"], n, core)
    steps["core inner"] = _step(strategies["stock"], n, core)
    return best_of_interleaved_rounds(steps, rounds, min_run_time)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50,500,1000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-run-time", type=float, default=0.2)
    parser.add_argument("--inner", default="aot_eager")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    strategies = {"eager": eager(), "floor": dynamo_eager(), "stock": stock(args.inner),
                  "prototype": prototype(args.inner)}  # fmt: skip
    ratios = {"floor": "prototype / floor", "eager": "prototype / eager", "stock": "prototype / stock"}
    command = "python scripts/seed_ratios.py " + " ".join(sys.argv[1:])
    lines = [
        "# Seed per-call cost against Dynamo's floor",
        "",
        provenance(command),
        "",
        f"Seed program `x.mul(2).unbind(0)`, x (N, 256), forward+backward; torch {torch.__version__}, inner "
        f"`{args.inner}`; {args.runs} runs x {args.rounds} interleaved rounds, process CPU time, one thread. "
        'Cells: median over runs (min-max). floor: `torch.compile(backend="eager")`. The inner backend\'s own cost: '
        "the core alone (`x.mul(2)`, one output) under stock minus the same under the floor, in the same rounds: "
        "what compiling the core adds per call (AOTAutograd's runtime wrappers and its autograd.Function), which "
        "issue 24's per-call target allows on top of the floor. stock / floor bounds what any backend below Dynamo "
        "can reach against stock: prototype / stock = (prototype / floor) / (stock / floor).",
        "",
        "| N | eager (us) | floor (us) | stock (us) | prototype (us) | "
        + " | ".join(ratios.values())
        + " | inner backend's own cost (us) | prototype / (floor + inner's own cost) | stock / floor |",
        "|---" * (8 + len(ratios)) + "|",
    ]
    for n in (int(s) for s in args.sizes.split(",")):
        runs = [one_run(strategies, n, args.rounds, args.min_run_time) for _ in range(args.runs)]
        cells = [str(n)]
        cells += [median_and_range([r[label] * 1e6 for r in runs], 0) for label in strategies]
        cells += [median_and_range([r["prototype"] / r[label] for r in runs], bold=True) for label in ratios]
        cells += [median_and_range([(r["core inner"] - r["core floor"]) * 1e6 for r in runs], 0)]
        cells += [median_and_range([r["prototype"] / (r["floor"] + r["core inner"] - r["core floor"]) for r in runs])]
        cells += [median_and_range([r["stock"] / r["floor"] for r in runs])]
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    write_results(lines, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
