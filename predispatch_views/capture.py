"""Stage 1: capture a program as a pre-dispatch ATen graph.

Pre-dispatch tracing records ops above the autograd key: the graph holds exactly the calls autograd sees in
eager (``chunk``, ``tensor_split``, ``hsplit``, ``narrow``... are not decomposed), so replaying a view node in
eager builds eager's autograd node for it. See Note [Replaying pre-dispatch views].
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti


def capture_graph_module(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> fx.GraphModule:
    """Re-trace a Dynamo FX graph at the pre-dispatch level.

    Dynamo hands a backend real inputs and a fake mode over its ShapeEnv (in the TracingContext); fakifying
    the inputs as AOTAutograd does keeps symbols and guards consistent with Dynamo's.
    """
    fake_mode = ti.detect_fake_mode(list(example_inputs))
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    fakes = [_fake_of(p, x, fake_mode) for p, x in zip(placeholders, example_inputs)]
    ctx = fake_mode if fake_mode is not None else contextlib.nullcontext()
    with ctx:
        return ti.trace_pre_dispatch(_as_callable(gm), fakes)


def capture_limitation(gm: fx.GraphModule) -> str | None:
    """Something in Dynamo's graph that pre-dispatch tracing would run but not record faithfully.

    make_fx records grad-mode and autocast changes as nodes, but an inference_mode region would silently be
    compiled with autograd on, and a custom autograd.Function (Dynamo's ``autograd_function_apply``) is inlined:
    its forward is traced, its backward dropped.
    """
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        name = getattr(n.target, "__name__", "")
        if name == "_enter_inference_mode":
            return "an inference_mode region inside the graph (pre-dispatch tracing does not record it)"
        if n.target is ti.AUTOGRAD_FUNCTION_APPLY:
            return "a custom autograd.Function (pre-dispatch tracing inlines its forward and drops its backward)"
    return None


def _fake_of(placeholder: fx.Node, example: Any, fake_mode: ti.FakeTensorMode | None) -> Any:
    """Dynamo hands backends real tensors and a fresh fake mode over its ShapeEnv: fakify as AOTAutograd does."""
    if isinstance(example, torch.Tensor) and fake_mode is not None:
        return ti.fakify_like_dynamo(example, fake_mode)
    value = placeholder.meta.get("example_value")
    return value if value is not None and not isinstance(value, torch.Tensor) else example


def _as_callable(gm: fx.GraphModule) -> Callable[..., Any]:
    # Dynamo graphs return a tuple; make_fx wants a plain function of positional inputs.
    def run(*args: Any) -> Any:
        return gm(*args)

    return run


def capture_function(
    flat_fn: Callable[..., Any], flat_tensors: Sequence[torch.Tensor]
) -> tuple[fx.GraphModule, ti.FakeTensorMode]:
    """Trace a plain function of tensors with static shapes (the no-Dynamo path)."""
    fake_mode = ti.FakeTensorMode()
    fakes = [fake_mode.from_tensor(t) for t in flat_tensors]
    with fake_mode:
        return ti.trace_pre_dispatch(flat_fn, fakes), fake_mode
