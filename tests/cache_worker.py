"""One fresh process of tests/test_compile_caches.py: ``python -m tests.cache_worker OUT PROGRAM[,PROGRAM...]``.

Compiles each named program with the prototype (inductor inner) with the AOTAutograd cache and the FX graph
cache on (TORCHINDUCTOR_CACHE_DIR, set by the parent, is shared between the processes), and records per
program the generated epilogue, what a user observes of the outputs, and the cache counters after it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from predispatch_views import _torch_internals as ti
from predispatch_views.pipeline import compile_dynamo_graph
from tests.parity_utils import observe


# Both programs have the same core (sin, mul, returned as the base): a warm cache hands the second one the
# first one's compiled core, and only the epilogue tells them apart.
def unbind_program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (torch.sin(x) * 2).unbind(0)


def chunk_program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (torch.sin(x) * 2).chunk(2, dim=1)


PROGRAMS: dict[str, Callable[..., Any]] = {"unbind": unbind_program, "chunk": chunk_program}


def make_inputs() -> list[torch.Tensor]:
    return [torch.randn(3, 4, generator=torch.Generator().manual_seed(0)).requires_grad_()]


def run(name: str) -> dict[str, Any]:
    epilogues: list[str | None] = []
    traces = []  # pre-dispatch traces made while compiling (Note [Slicing Dynamo's graph]: none for these programs)
    trace = ti.trace_pre_dispatch
    ti.trace_pre_dispatch = lambda *args, **kwargs: traces.append(1) or trace(*args, **kwargs)

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        program = compile_dynamo_graph(gm, example_inputs, "inductor", strict=True)
        epilogues.append(program.epilogue_source)
        return program.run

    torch._dynamo.reset()
    with ti.compile_caches_enabled():
        observed = observe(torch.compile(PROGRAMS[name], backend=backend), make_inputs)
    ti.trace_pre_dispatch = trace
    return {
        "epilogues": epilogues,
        "observed": observed,
        "counters": ti.compile_counters(),
        "pre_dispatch_traces": len(traces),
    }


def main(out: str, names: list[str]) -> None:
    torch.set_num_threads(1)
    torch.save({name: run(name) for name in names}, out)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1], sys.argv[2].split(","))
