"""What each segment costs per call (Note [Segments] in predispatch_views/segments.py; issue 22).

Usage (from the repository root)::

    python scripts/segment_cost.py --inner aot_eager --writes 0,1,2,3 --rounds 7 --output results/segment-cost.md

The workload ``chain(x, k)`` computes ``y = x * 2``, then ``k`` times writes a slice of ``y`` in place (a write
through a view, replayed in eager) and reads ``y`` in compiled code after it (``y = y.sin()``), and returns the
slices and the last value. With ``k`` writes the prototype runs ``k + 1`` segments, where stock (which falls back
for nothing here) compiles one function. Each row gives forward+backward process CPU time per call, one thread,
as the best of ``--rounds`` interleaved rounds (this machine is shared: wall time is noise), for eager, stock and
the prototype, and the prototype's ratios; the last column is what each extra segment adds to the prototype's
time over stock's, against the ``k = 0`` row: ((prototype - stock) - (prototype_0 - stock_0)) / (segments - 1),
in microseconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import predispatch_views as pv
from predispatch_views import outcomes
from predispatch_views.compare.timing import benchmark_environment, provenance, write_results


def make_chain(k: int) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    def chain(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 2
        slices = []
        for _ in range(k):
            v = y[:2]
            v.mul_(3)  # a write through a view: replayed in eager
            slices.append(v)
            y = y.sin()  # compiled code that reads the written base: the program is cut after the write
        return (*slices, y)

    chain.__name__ = f"chain_{k}"
    return chain


def step(fn: Callable[..., Any], x: torch.Tensor) -> None:
    outs = [o for o in fn(x) if o.requires_grad]
    torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])


def cpu_time_per_call(fn: Callable[..., Any], x: torch.Tensor, calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        step(fn, x)
    return (time.process_time() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inner", default="aot_eager")
    parser.add_argument("--writes", default="0,1,2,3")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    command = "python scripts/segment_cost.py " + " ".join(sys.argv[1:])
    columns = ["writes", "segments", "eager", "stock", "prototype", "/ eager", "/ stock", "us / extra segment"]
    lines = [
        "# What each segment costs per call",
        "",
        provenance(command),
        "",
        f"`chain(x, k)` (scripts/segment_cost.py) on x {args.size}x{args.size}, inner `{args.inner}`: forward+backward "
        f"process CPU time per call in microseconds, one thread, best of {args.rounds} interleaved rounds of "
        f"{args.calls} calls. The last column is what each extra segment adds to the prototype's time over stock's, "
        "against the row without writes.",
        "",
        "## Segments",
        "",
        "| " + " | ".join(columns) + " |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base: float | None = None
    with benchmark_environment():
        for k in (int(w) for w in args.writes.split(",")):
            fn = make_chain(k)
            x = torch.randn(args.size, args.size, requires_grad=True)
            torch._dynamo.reset()
            stock = torch.compile(fn, backend=args.inner)
            outcomes.GRAPHS.clear()
            proto = torch.compile(make_chain(k), backend=pv.backend(args.inner, strict=True))
            strategies = {"eager": fn, "stock": stock, "prototype": proto}
            for f in strategies.values():  # compile, warm up
                step(f, x)
                step(f, x)
            detail = outcomes.GRAPHS[-1][2] if outcomes.GRAPHS else ""
            segments = int(detail.rsplit("in ", 1)[1].split()[0]) if detail.endswith("segments") else 1
            best = {name: float("inf") for name in strategies}
            for r in range(args.rounds):
                for name in list(strategies)[r % 3 :] + list(strategies)[: r % 3]:
                    best[name] = min(best[name], cpu_time_per_call(strategies[name], x, args.calls))
            over_stock = best["prototype"] - best["stock"]
            base = over_stock if k == 0 else base
            per_segment = f"{(over_stock - base) / (segments - 1):.0f}" if base is not None and segments > 1 else "-"
            lines.append(
                f"| {k} | {segments} | {best['eager']:.0f} | {best['stock']:.0f} | {best['prototype']:.0f} | "
                f"{best['prototype'] / best['eager']:.2f} | {best['prototype'] / best['stock']:.2f} | {per_segment} |"
            )
            print(lines[-1], flush=True)
    write_results(lines, args.output)


if __name__ == "__main__":
    main()
