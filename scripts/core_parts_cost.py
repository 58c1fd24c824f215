"""What cutting the core into independent parts costs at runtime (Note [Independent parts of the core]).

Usage (from the repository root)::

    python scripts/core_parts_cost.py --inner aot_eager,inductor --heads 1,2,4,8 --output results/core-parts-cost.md

The workload has ``k`` heads that share only the input: ``(x @ w_i).chunk(4, 1)`` for ``i < k``, so the
prototype compiles ``k`` parts. Each row times forward+backward under stock, the prototype as it is, and the
prototype with the core kept whole (``split_core`` replaced by the whole core, as before the parts existed), each
compiled on its own copy in one process: torch.utils.benchmark's blocked_autorange on process CPU time, one
thread, best of interleaved rounds. design/05 quotes the file it writes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.utils.benchmark as benchmark

import predispatch_views as pv
from predispatch_views import slicing
from predispatch_views.compare.timing import benchmark_environment, fresh_copy, provenance, write_results


def heads(x: torch.Tensor, *ws: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(o for w in ws for o in (x @ w).chunk(4, 1))


def step(fn: Callable[..., Any], args: list[torch.Tensor]) -> None:
    outs = fn(*args)
    torch.autograd.backward(list(outs), [torch.ones_like(o) for o in outs])


def compiled(strategy: str, inner: str) -> Callable[..., Any]:
    fn = fresh_copy(heads)
    if strategy == "stock":
        return torch.compile(fn, backend=inner)
    return torch.compile(fn, backend=pv.backend(inner, strict=True))


def best_of_rounds(fns: dict[str, Callable[..., Any]], args: list[torch.Tensor], rounds: int) -> dict[str, float]:
    """Microseconds per forward+backward: the best ``blocked_autorange`` median over interleaved rounds, process
    CPU time, one thread."""
    best = dict.fromkeys(fns, float("inf"))
    for r in range(rounds):
        for label in list(fns)[r % len(fns) :] + list(fns)[: r % len(fns)]:
            timer = benchmark.Timer(
                "step(fn, args)", globals={"step": step, "fn": fns[label], "args": args}, timer=time.process_time
            )
            best[label] = min(best[label], timer.blocked_autorange(min_run_time=0.3).median * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inner", default="aot_eager")
    parser.add_argument("--heads", default="1,2,4,8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    command = "python scripts/core_parts_cost.py " + " ".join(sys.argv[1:])
    lines = [
        "# What independent parts of the core cost",
        "",
        provenance(command),
        "",
        "`k` heads `(x @ w_i).chunk(4, 1)` sharing only `x` (so `k` parts), x (64, 128), w_i (128, 64): "
        f"forward+backward in microseconds of process CPU time, one thread, best of {args.rounds} interleaved rounds.",
        "",
        "## Parts against the whole core",
        "",
        "| inner | heads | stock | prototype (k parts) | prototype (whole core) | parts / whole | parts / stock |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    with benchmark_environment():
        for inner in args.inner.split(","):
            for k in map(int, args.heads.split(",")):
                torch._dynamo.reset()
                torch.manual_seed(0)
                inputs = [torch.randn(64, 128, requires_grad=True)] + [
                    torch.randn(128, 64, requires_grad=True) for _ in range(k)
                ]
                fns = {"stock": compiled("stock", inner), "parts": compiled("prototype", inner)}
                for fn in fns.values():  # compile, warm the caches
                    step(fn, inputs)
                    step(fn, inputs)
                with mock.patch.object(slicing, "split_core", lambda core, groups: slicing._whole(core)):
                    fns["whole"] = compiled("prototype", inner)
                    step(fns["whole"], inputs)  # compiled with the core whole
                    step(fns["whole"], inputs)
                best = best_of_rounds(fns, inputs, args.rounds)
                lines.append(
                    f"| {inner} | {k} | {best['stock']:.0f} | {best['parts']:.0f} | {best['whole']:.0f} | "
                    f"{best['parts'] / best['whole']:.2f} | {best['parts'] / best['stock']:.2f} |"
                )
                print(lines[-1], flush=True)
    write_results(lines, args.output)


if __name__ == "__main__":
    main()
