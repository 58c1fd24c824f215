"""The measuring environment the comparison's timings share (benchmarks.py, compile_time.py, models.py)."""

from __future__ import annotations

import contextlib
import functools
import resource
import statistics
import time
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch


def fresh_copy(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its own code object. Dynamo keeps compiled code per code object, so each strategy compiles
    its own copy and all of them stay live side by side, without ``torch._dynamo.reset()`` between them."""
    if not isinstance(fn, types.FunctionType):
        return fn
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    return functools.update_wrapper(copy, fn)


@contextlib.contextmanager
def benchmark_environment() -> Iterator[None]:
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # also what inductor's CPU codegen sees at compile time
    try:
        with (
            inductor_config.patch(fx_graph_cache=False),
            functorch_config.patch(enable_autograd_cache=False),
            torch._dynamo.config.patch(cache_size_limit=64),
        ):
            yield
    finally:
        torch.set_num_threads(threads)


def median_and_range(values: Sequence[float], digits: int = 2, bold: bool = False) -> str:
    """``median (min-max)``, the cell every repeated measure of the comparison reports; ``bold`` marks the median."""
    median = f"{statistics.median(values):.{digits}f}"
    return f"{f'**{median}**' if bold else median} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children (gcc for inductor): getrusage, not os.times, for
    microseconds rather than 10 ms clock ticks (a small workload compiles in 0.1 s)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def provenance(command: str) -> str:
    """The line a generated results file opens with: what wrote it, on which engine and machine, and when."""
    import datetime
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False).stdout.strip()

    # Dirty only where the package itself differs from the commit (a results file written earlier does not count).
    engine = (git("rev-parse", "--short", "HEAD") or "unknown") + (
        "-dirty" if git("status", "--porcelain", "--", "predispatch_views") else ""
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"_Written by `{command}` (engine {engine}, torch {torch.__version__}, {os.cpu_count()} CPUs, load average "
        f"{load:.1f} at the start, {datetime.date.today().isoformat()}); generated, do not edit._"
    )


def write_results(lines: Sequence[str], output: Any) -> None:
    """A script's results file: the Markdown ``lines`` written to ``output`` (a Path), or printed without one."""
    text = "\n".join(lines) + "\n"
    if output is not None:
        output.write_text(text)
    else:
        print(text)


def best_of_interleaved_rounds(
    steps: dict[str, Callable[[], Any]], rounds: int, min_run_time: float
) -> dict[str, float]:
    """Seconds per call of each step: the best ``Timer.blocked_autorange`` median over ``rounds`` rounds that run
    every step once, in an order rotated each round; process CPU time, one thread (the scripts' common measure)."""
    from torch.utils import benchmark

    best = dict.fromkeys(steps, float("inf"))
    for r in range(rounds):
        for label in list(steps)[r % len(steps) :] + list(steps)[: r % len(steps)]:
            timer = benchmark.Timer("step()", globals={"step": steps[label]}, timer=time.process_time, num_threads=1)
            best[label] = min(best[label], timer.blocked_autorange(min_run_time=min_run_time).median)
    return best
