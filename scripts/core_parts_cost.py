"""What cutting the core into independent parts costs at runtime (Note [Independent parts of the core]).

Usage (from the repository root)::

    python scripts/core_parts_cost.py --inner aot_eager,inductor --heads 1,2,4,8

The workload has ``k`` heads that share only the input: ``(x @ w_i).chunk(4, 1)`` for ``i < k``, so the
prototype compiles ``k`` parts. Each row times forward+backward (torch.utils.benchmark, blocked_autorange, in
one process) under stock, the prototype as it is, and the prototype with the core kept whole (``split_core``
replaced by the whole core, as before the parts existed), and prints the ratios.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.utils.benchmark as benchmark

import predispatch_views as pv
from predispatch_views import slicing


def heads(x: torch.Tensor, *ws: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(o for w in ws for o in (x @ w).chunk(4, 1))


def step(fn: Callable[..., Any], args: list[torch.Tensor]) -> None:
    outs = fn(*args)
    torch.autograd.backward(list(outs), [torch.ones_like(o) for o in outs])


def timed(fn: Callable[..., Any], args: list[torch.Tensor]) -> float:
    step(fn, args)  # compile, and warm the caches
    step(fn, args)
    timer = benchmark.Timer("step(fn, args)", globals={"step": step, "fn": fn, "args": args})
    return timer.blocked_autorange(min_run_time=1.0).median * 1e6


def compiled(strategy: str, inner: str) -> Callable[..., Any]:
    torch._dynamo.reset()
    if strategy == "stock":
        return torch.compile(heads, backend=inner)
    return torch.compile(heads, backend=pv.backend(inner, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inner", default="aot_eager")
    parser.add_argument("--heads", default="1,2,4,8")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; fwd+bwd median in microseconds")
    print("| inner | heads | stock | prototype (k parts) | prototype (whole core) | parts / whole | parts / stock |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for inner in args.inner.split(","):
        for k in map(int, args.heads.split(",")):
            torch.manual_seed(0)
            inputs = [torch.randn(64, 128, requires_grad=True)] + [
                torch.randn(128, 64, requires_grad=True) for _ in range(k)
            ]
            stock = timed(compiled("stock", inner), inputs)
            parts = timed(compiled("prototype", inner), inputs)
            with mock.patch.object(slicing, "split_core", lambda core, groups: slicing._whole(core)):
                whole = timed(compiled("prototype", inner), inputs)
            print(
                f"| {inner} | {k} | {stock:.0f} | {parts:.0f} | {whole:.0f} | {parts / whole:.2f} | "
                f"{parts / stock:.2f} |"
            )


if __name__ == "__main__":
    main()
