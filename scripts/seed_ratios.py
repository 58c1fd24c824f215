"""The seed program of pytorch PR #111411: forward+backward time at 50 and 500 outputs, as ratios.

Eager, stock ``torch.compile(backend="aot_eager")`` and the prototype (aot_eager inside), measured in one
process with torch.utils.benchmark. Run: ``python scripts/seed_ratios.py [--sizes 50,500]``.
"""

from __future__ import annotations

import argparse
import types

import torch
from torch.utils import benchmark

from predispatch_views.compare.strategies import Strategy, eager, prototype, stock


def seed(x):
    intermediate = x.mul(2)
    return intermediate.unbind(0)


def _fresh(fn):
    # A new code object per strategy, so Dynamo cache entries of one strategy never serve another.
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__)


def measure(strategy: Strategy, n: int, min_run_time: float) -> float:
    torch._dynamo.reset()
    fn = strategy.make(_fresh(seed))
    x = torch.randn(n, 256, requires_grad=True)

    def step() -> None:
        outs = fn(x)
        torch.autograd.backward([o.sum() for o in outs])
        x.grad = None

    for _ in range(3):
        step()
    timer = benchmark.Timer(stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="50,500")
    parser.add_argument("--min-run-time", type=float, default=2.0)
    args = parser.parse_args()
    strategies = [eager(), stock("aot_eager"), prototype("aot_eager")]
    print("| N | eager (ms) | stock[aot_eager] (ms) | prototype[aot_eager] (ms) | proto / eager | proto / stock |")
    print("|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        e, s, p = (measure(strategy, n, args.min_run_time) * 1e3 for strategy in strategies)
        print(f"| {n} | {e:.3f} | {s:.3f} | {p:.3f} | {p / e:.2f}x | {p / s:.2f}x |")


if __name__ == "__main__":
    main()
