"""Compile time of the deep_mlp workload (40 x Linear+ReLU, then .chunk(2)), stock vs prototype, by phase.

Usage (from the repository root)::

    python scripts/compile_profile.py --inner aot_eager,inductor --repeats 5

Each repeat compiles the workload afresh under stock and under the prototype (caches off, Dynamo reset, after
a warm-up on toy sizes) and times the first forward+backward in CPU seconds of this process and its waited-for
children (gcc for inductor), so that other jobs on a shared machine inflate it less than wall time. The
prototype's time is split into the pre-dispatch capture, the inner backend on the core, and the rest (Dynamo,
selection, functionalization, slicing, the runtime). Prints the median and best per strategy.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import predispatch_views.capture as capture
import predispatch_views.pipeline as pipeline
from predispatch_views.compare.benchmarks import _benchmark_environment, fresh_copy
from predispatch_views.compare.strategies import Strategy, _compiled, prototype, stock
from predispatch_views.compare.workloads import deep_mlp, tiny_workloads

PHASES: dict[str, float] = {}


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        start = cpu_seconds()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASES[name] = PHASES.get(name, 0.0) + cpu_seconds() - start

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inner", default="aot_eager,inductor")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=40)
    args = parser.parse_args()
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1  # compile in this process: its gcc children are counted
    resolve = pipeline.resolve_inner
    pipeline.capture_graph_module = capture.capture_graph_module = timed("capture", capture.capture_graph_module)
    pipeline.resolve_inner = lambda inner: timed("inner", resolve(inner))
    device = torch.device("cpu")
    print("| inner | strategy | median (s) | best (s) | at best: capture / inner / rest (s) | all (s) |")
    print("|---|---|---|---|---|---|")
    with _benchmark_environment():
        for inner in args.inner.split(","):
            stock_timed = Strategy("stock", inner, lambda fn, i=inner: _compiled(fn, timed("inner", resolve(i)), None))
            for strategy in (stock(inner), prototype(inner)):
                for workload in tiny_workloads():
                    torch._dynamo.reset()
                    workload.instantiate(strategy.make, device).step()
            runs: dict[str, list[tuple[float, dict[str, float]]]] = {}
            for _ in range(args.repeats):
                for strategy in (stock_timed, prototype(inner)):
                    torch._dynamo.reset()
                    PHASES.clear()
                    instance = deep_mlp(args.layers).instantiate(lambda fn, s=strategy: s.make(fresh_copy(fn)), device)
                    start = cpu_seconds()
                    instance.step()
                    runs.setdefault(strategy.name, []).append((cpu_seconds() - start, dict(PHASES)))
            for name, results in runs.items():
                total, phases = min(results, key=lambda r: r[0])
                capture_s, inner_s = phases.get("capture", 0.0), phases.get("inner", 0.0)
                median = statistics.median(r[0] for r in results)
                every = ", ".join(f"{r[0]:.2f}" for r in results)
                print(
                    f"| {inner} | {name} | {median:.2f} | {total:.2f} | "
                    f"{capture_s:.2f} / {inner_s:.2f} / {total - capture_s - inner_s:.2f} | {every} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
