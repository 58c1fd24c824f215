"""Random draws nothing reads, kept by the inner backend as eager keeps them (a private inductor config)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def keeping_random_draws(compile_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``compile_fn`` (a Dynamo backend other than inductor), compiling with random ops counted as side effects.

    Note [Random draws nothing reads]
    ``fx.Graph.eliminate_dead_code`` treats a random op as pure under a Dynamo ``TracingContext`` unless
    ``torch._inductor.config.fallback_random`` is set, so AOTAutograd under Dynamo drops a draw whose result
    nothing reads (``t0 = b @ b.t(); t0.bernoulli_(0.5)``, ``t0`` never used again): the global generator then ends
    the call where eager's does not, and every later random number differs. ``backend="eager"`` and AOTAutograd
    without Dynamo (``aot_function``, compile_function's path) keep the draw. Outside inductor the flag decides
    only that elimination; inductor (not wrapped) draws from its own seed anyway unless the user sets the flag.
    """

    def compile_keeping_random_draws(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        with torch._inductor.config.patch(fallback_random=True):
            return compile_fn(gm, example_inputs)

    return compile_keeping_random_draws
