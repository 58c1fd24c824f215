"""Compile time of the comparison's workloads: stock, the prototype, and the prototype with the capture forced.

Usage (from the repository root)::

    python scripts/compile_profile.py --inner aot_eager,inductor --repeats 5 --output design/compile-time.md

Each round compiles every workload afresh under each strategy, in a rotated order (caches off, Dynamo reset,
a fresh inductor cache directory per compile, after a warm-up on toy sizes), and times the first
forward+backward in CPU seconds of this process and its waited-for children (gcc for inductor), so that
other jobs on a shared machine inflate it less than wall time.
Strategies:
- ``stock``: ``torch.compile(fn, backend=inner)``;
- ``prototype``: the backend as shipped (Note [Slicing Dynamo's graph]: graphs without mutations are sliced on
  Dynamo's own graph, with no pre-dispatch trace);
- ``prototype_capture``: the backend with ``PREDISPATCH_VIEWS_SLICE_DYNAMO`` off, every graph captured at the
  pre-dispatch level first (the engine before the slice).
Per workload: each strategy's median and spread, and prototype / stock as the median of the per-round ratios with
their range; the prototype's time is also split into the pre-dispatch capture, the inner backend, and the rest.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch._inductor.utils import fresh_cache

import predispatch_views.capture as capture
import predispatch_views.dynamo_slice as dynamo_slice
import predispatch_views.pipeline as pipeline
from predispatch_views.compare.benchmarks import _benchmark_environment, fresh_copy
from predispatch_views.compare.strategies import Strategy, _compiled, prototype
from predispatch_views.compare.workloads import Workload, deep_mlp, kjt, layers, qkv, seed, single_view, tiny_workloads

PHASES: dict[str, float] = {}
WORKLOADS: dict[str, Callable[[], Workload]] = {
    "deep_mlp": lambda: deep_mlp(40),
    "seed": lambda: seed(50),
    "qkv": qkv,
    "kjt": lambda: kjt(256, 32, 16),
    "layers": lambda: layers(4),
    "single_view": single_view,
}


def cpu_seconds() -> float:
    # getrusage, not os.times: microseconds rather than 10 ms clock ticks (a small workload compiles in 0.1 s).
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        start = cpu_seconds()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASES[name] = PHASES.get(name, 0.0) + cpu_seconds() - start

    return run


def strategies(inner: str) -> list[tuple[str, Strategy, bool]]:
    """(name, strategy, slice on): stock's inner backend is timed as the prototype's is."""
    resolve = pipeline.resolve_inner
    stock_timed = Strategy("stock", inner, lambda fn: _compiled(fn, timed("inner", resolve(inner)), None))
    return [("stock", stock_timed, True), ("prototype", prototype(inner), True),
            ("prototype_capture", prototype(inner), False)]  # fmt: skip


def measure(inner: str, names: list[str], repeats: int) -> dict[str, dict[str, list[tuple[float, dict[str, float]]]]]:
    device = torch.device("cpu")
    for _, strategy, _ in strategies(inner)[:2]:
        for workload in tiny_workloads():
            torch._dynamo.reset()
            workload.instantiate(strategy.make, device).step()
    runs: dict[str, dict[str, list[tuple[float, dict[str, float]]]]] = {}
    for r in range(repeats):
        for name in names:
            order = strategies(inner)
            order = order[r % len(order) :] + order[: r % len(order)]  # rotated: no strategy is always first
            for label, strategy, sliced in order:
                dynamo_slice.ENABLED = sliced
                torch._dynamo.reset()
                PHASES.clear()
                # A fresh inductor cache per compile: no strategy loads kernels another one compiled (gcc).
                with fresh_cache():
                    instance = WORKLOADS[name]().instantiate(lambda fn, s=strategy: s.make(fresh_copy(fn)), device)
                    start = cpu_seconds()
                    instance.step()
                runs.setdefault(name, {}).setdefault(label, []).append((cpu_seconds() - start, dict(PHASES)))
            dynamo_slice.ENABLED = True
            print(f"# {inner} round {r + 1}/{repeats} {name}", file=sys.stderr, flush=True)
    return runs


def table(inner: str, runs: dict[str, dict[str, list[tuple[float, dict[str, float]]]]]) -> list[str]:
    lines = [
        f"### inner backend `{inner}`",
        "",
        "| workload | stock (s) | prototype (s) | prototype / stock | prototype_capture / stock | "
        "prototype at median: capture / inner / rest (s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, by_label in runs.items():
        cells = [name]
        for label in ("stock", "prototype"):
            times = [t for t, _ in by_label[label]]
            cells.append(f"{statistics.median(times):.3f} ({min(times):.3f}-{max(times):.3f})")
        for label in ("prototype", "prototype_capture"):
            ratios = [p / s for (p, _), (s, _) in zip(by_label[label], by_label["stock"])]
            cells.append(f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f})")
        ordered = sorted(by_label["prototype"], key=lambda run: run[0])
        total, phases = ordered[len(ordered) // 2]
        capture_s, inner_s = phases.get("capture", 0.0), phases.get("inner", 0.0)
        cells.append(f"{capture_s:.3f} / {inner_s:.3f} / {total - capture_s - inner_s:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inner", default="aot_eager,inductor")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--output", type=Path, help="write the tables there (with a header), besides stdout")
    args = parser.parse_args()
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1  # compile in this process: its gcc children are counted
    capture.capture_graph_module = timed("capture", capture.capture_graph_module)
    resolve = pipeline.resolve_inner
    pipeline.resolve_inner = lambda inner: timed("inner", resolve(inner))
    names = args.workloads.split(",")
    lines: list[str] = []
    with _benchmark_environment():
        for inner in args.inner.split(","):
            lines += table(inner, measure(inner, names, args.repeats))
            print("\n".join(lines[-len(names) - 5 :]), flush=True)
    if args.output is not None:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
        header = [
            "# Compile time: prototype vs stock (generated; do not edit)",
            "",
            f"Generated by `python scripts/compile_profile.py {' '.join(sys.argv[1:])}` on "
            f"{datetime.date.today()}, torch {torch.__version__}, {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end, commit {commit.strip()}"
            f"{' (with uncommitted changes)' if dirty.stdout.strip() else ''}.",
            "",
            "CPU seconds of the first forward+backward (this process and its gcc children), caches off and a fresh "
            f"inductor cache per compile, after a warm-up; {args.repeats} rounds, strategies in rotated order. "
            "Cells: median (min-max); ratios: median of the per-round ratios (min-max). `prototype_capture`: "
            "the prototype with the slice of Dynamo's graph "
            "off (every graph traced at the pre-dispatch level first). Workloads: "
            + "; ".join(f"`{n}`: {WORKLOADS[n]().description}" for n in names)
            + ".",
            "",
        ]
        args.output.write_text("\n".join(header + lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
