"""Random draws nothing reads, kept by the inner backend as eager keeps them (a private inductor config)."""

from __future__ import annotations

import re
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


def refused_a_kept_draw(e: BaseException) -> bool:
    """Whether ``e`` is AOTAutograd's default partitioner refusing a random op whose results nothing reads.

    Note [A kept draw the partitioner refuses]
    With ``fallback_random`` set, the joint graph's elimination keeps a multi-output random op (``native_dropout``,
    from ``F.dropout(a, 0.5, True)``) whose results nothing reads, and drops its ``getitem`` users. Where the joint
    graph has no backward node (``t0 = b.exp()``, the dead dropout, then ``t0.t()`` taken under no_grad and
    returned: the joint graph takes no tangent), ``min_cut_rematerialization_partition`` hands it to
    ``default_partition``, which counts a node without users as no multi-output node and, its value being a tuple,
    raises "Expected native_dropout to be a tensor" (torch 2.13 and 2.14.1; fuzzer s1808_1837, whose graph falls back
    to stock under compiled autograd). Stock, without the flag, drops the draw and compiles; eager draws it. The graph
    runs uncompiled then (Note [Graphs the inner backend rejects] in inner_backend.py).
    """
    if not isinstance(e, AssertionError) or not _NOT_A_TENSOR.fullmatch(str(e)):
        return False
    tb, code = e.__traceback__, None
    while tb is not None:
        tb, code = tb.tb_next, tb.tb_frame.f_code
    return code is not None and code.co_name == "default_partition" and code.co_filename.endswith("partitioners.py")


_NOT_A_TENSOR = re.compile(r"Expected \S+ to be a tensor")
