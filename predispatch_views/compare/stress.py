"""The stress half of ``python -m predispatch_views compare --slow``: programs at sizes that break naive designs.

Workloads (each checked against eager, each timed, nothing asserted on time):
- ``10k_outputs``: ``x.mul(2).unbind(0)`` returning 10,000 views of one base;
- ``view_chain_200``: 200 view calls (t, unsqueeze, squeeze, view, in turn) then an unbind: a 200-node epilogue;
- ``100_recompiles``: one function called on 100 distinct static shapes (``dynamic=False``, the recompile limit
  raised): 100 compiles, each building its own epilogue.

For each: compile (wall time of the first call: Dynamo, the pipeline, the inner backend), one steady call
(median of a few), backward, and whether the result matched eager (values, view structure, grad_fn types,
gradients). Stock with the same inner backend is the reference row. ``tests/test_stress.py`` runs the same
workloads on the prototype (``--runslow``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..backend import backend as prototype_backend


@dataclass(frozen=True)
class StressResult:
    workload: str
    strategy: str
    size: int
    compiles: int
    compile_s: float  # first call(s): tracing and compiling included
    call_s: float  # one call at steady state (median)
    backward_s: float
    matches_eager: bool
    note: str = ""


class CountingBackend:
    """A backend callable that counts the graphs Dynamo hands it."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self.inner = inner
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        self.graphs += 1
        return self.inner(gm, example_inputs)


def make_backend(strategy: str, inner: str) -> CountingBackend:
    """``prototype`` (strict: a fallback is a failure here) or ``stock``, with the given inner backend."""
    if strategy == "prototype":
        return CountingBackend(prototype_backend(inner, strict=True))
    if strategy == "stock":
        from torch._dynamo.backends.registry import lookup_backend

        return CountingBackend(lookup_backend(inner))
    raise ValueError(strategy)


@contextlib.contextmanager
def recompile_limit(limit: int) -> Iterator[None]:
    config = torch._dynamo.config
    names = [n for n in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit") if hasattr(config, n)]
    with config.patch(**dict.fromkeys(names, max(limit, 256))):
        yield


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _median_call(fn: Callable[[], Any], repeats: int) -> float:
    return statistics.median(_timed(fn)[1] for _ in range(repeats))


def _outputs_match(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor], prototype: bool) -> bool:
    """Values always; for the prototype also eager's view structure: one shared base, same grad_fn types."""
    if len(actual) != len(expected):
        return False
    if not all(torch.equal(a, e) for a, e in zip(actual, expected)):
        return False
    if not prototype:
        return True
    if any(a._is_view() != e._is_view() for a, e in zip(actual, expected)):
        return False
    if len({id(a._base) for a in actual}) != len({id(e._base) for e in expected}):
        return False
    return [type(a.grad_fn).__name__ for a in actual] == [type(e.grad_fn).__name__ for e in expected]


def _backward(outs: Sequence[torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, float]:
    x.grad = None

    def run() -> torch.Tensor:
        torch.autograd.backward(list(outs), [torch.ones_like(o) for o in outs])
        assert x.grad is not None
        return x.grad.clone()

    return _timed(run)


# The workloads. Each is a program and an input maker; ``size`` scales it.


def many_outputs_program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.mul(2).unbind(0)


def view_chain_program(length: int) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    """``length`` view calls on an intermediate, then an unbind of the result."""

    def program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x.mul(2)
        for i in range(length):
            step = i % 4
            if step == 0:
                y = y.t()
            elif step == 1:
                y = y.unsqueeze(0)
            elif step == 2:
                y = y.squeeze(0)
            else:
                y = y.view(y.shape)
        return y.unbind(0)

    return program


def recompile_program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.sin().split(2)


def run_many_outputs(strategy: str, inner: str = "aot_eager", size: int = 10_000, device: str = "cpu") -> StressResult:
    torch._dynamo.reset()
    backend = make_backend(strategy, inner)
    compiled = torch.compile(many_outputs_program, backend=backend, dynamic=False)
    x = torch.randn(size, 2, device=device, requires_grad=True)
    outs, compile_s = _timed(lambda: compiled(x))
    call_s = _median_call(lambda: compiled(x), 3)
    grad, backward_s = _backward(outs, x)
    expected = many_outputs_program(x)
    ok = _outputs_match(outs, expected, strategy == "prototype") and torch.equal(grad, torch.full_like(x, 2.0))
    return StressResult(
        f"{size}_outputs", f"{strategy}[{inner}]", size, backend.graphs, compile_s, call_s, backward_s, ok
    )


def run_view_chain(strategy: str, inner: str = "aot_eager", size: int = 200, device: str = "cpu") -> StressResult:
    torch._dynamo.reset()
    backend = make_backend(strategy, inner)
    program = view_chain_program(size)
    compiled = torch.compile(program, backend=backend, dynamic=False)
    x = torch.randn(3, 4, device=device, requires_grad=True)
    outs, compile_s = _timed(lambda: compiled(x))
    call_s = _median_call(lambda: compiled(x), 5)
    grad, backward_s = _backward(outs, x)
    expected = program(x)
    ok = _outputs_match(outs, expected, strategy == "prototype") and torch.equal(grad, torch.full_like(x, 2.0))
    depth = _view_depth(outs[0])
    note = f"view nodes under an output: {depth} (eager {_view_depth(expected[0])})"
    if strategy == "prototype":
        ok = ok and depth == _view_depth(expected[0])
    return StressResult(
        f"view_chain_{size}", f"{strategy}[{inner}]", size, backend.graphs, compile_s, call_s, backward_s, ok, note
    )


def _view_depth(t: torch.Tensor) -> int:
    """How many view autograd nodes lie between ``t`` and the first non-view node below it."""
    view_names = ("TBackward0", "UnsqueezeBackward0", "SqueezeBackward1", "ViewBackward0", "UnbindBackward0")
    depth, fn = 0, t.grad_fn
    while fn is not None and type(fn).__name__ in view_names:
        depth += 1
        fn = fn.next_functions[0][0]
    return depth


def run_recompiles(strategy: str, inner: str = "aot_eager", size: int = 100, device: str = "cpu") -> StressResult:
    torch._dynamo.reset()
    backend = make_backend(strategy, inner)
    ok = True
    with recompile_limit(size + 8):
        compiled = torch.compile(recompile_program, backend=backend, dynamic=False)
        inputs = [torch.randn(n, 3, device=device, requires_grad=True) for n in range(2, size + 2)]
        start = time.perf_counter()
        for x in inputs:
            outs = compiled(x)
            ok = ok and _outputs_match(outs, recompile_program(x), strategy == "prototype")
        compile_s = time.perf_counter() - start
        call_s = _median_call(lambda: compiled(inputs[-1]), 5)
        outs = compiled(inputs[-1])
        grad, backward_s = _backward(outs, inputs[-1])
        ok = ok and torch.allclose(grad, inputs[-1].detach().cos())
    ok = ok and backend.graphs == size
    note = f"{compile_s / max(backend.graphs, 1) * 1e3:.0f} ms per compile"
    return StressResult(
        f"{size}_recompiles", f"{strategy}[{inner}]", size, backend.graphs, compile_s, call_s, backward_s, ok, note
    )


WORKLOADS: dict[str, tuple[Callable[..., StressResult], int]] = {
    "many_outputs": (run_many_outputs, 10_000),
    "view_chain": (run_view_chain, 200),
    "recompiles": (run_recompiles, 100),
}


def run_all(
    strategies: Sequence[str] = ("prototype", "stock"),
    inner: str = "aot_eager",
    scale: float = 1.0,
    device: str = "cpu",
    echo: Callable[[str], None] = print,
) -> list[StressResult]:
    results = []
    for run, size in WORKLOADS.values():
        for strategy in strategies:
            result = run(strategy, inner, max(2, int(size * scale)), device)
            echo(
                f"stress {result.workload:>16} {result.strategy:>20}: compile {result.compile_s:8.2f} s, "
                f"call {result.call_s * 1e3:9.2f} ms, backward {result.backward_s * 1e3:9.2f} ms, "
                f"graphs {result.compiles}, matches eager: {result.matches_eager} {result.note}"
            )
            results.append(result)
    torch._dynamo.reset()
    return results


def markdown_table(results: Sequence[StressResult]) -> str:
    lines = [
        "## Stress",
        "",
        "Wall-clock seconds on this machine (compile = first call, or all 100 calls for the recompiles); "
        "nothing here is asserted on time.",
        "",
        "| workload | strategy | graphs | compile (s) | call (ms) | backward (ms) | matches eager | note |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.workload} | {r.strategy} | {r.compiles} | {r.compile_s:.2f} | {r.call_s * 1e3:.2f} | "
            f"{r.backward_s * 1e3:.2f} | {'yes' if r.matches_eager else '**no**'} | {r.note} |"
        )
    return "\n".join(lines)


def write_csv(results: Sequence[StressResult], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(list(StressResult.__dataclass_fields__))
        for r in results:
            writer.writerow([getattr(r, name) for name in StressResult.__dataclass_fields__])


def run_stress_section(args: argparse.Namespace, out_dir: Path) -> str:
    """Run every stress workload on the prototype and stock (inner aot_eager); print and return the Markdown.

    ``--quick`` skips the stock rows (stock's compile of the 10,000-output program alone takes minutes).
    """
    strategies = ("prototype",) if getattr(args, "quick", False) else ("prototype", "stock")
    device = getattr(args, "device", "cpu")
    results = run_all(strategies, "aot_eager", 1.0, device)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(results, out_dir / "stress.csv")
    table = markdown_table(results)
    print(table)
    return table
