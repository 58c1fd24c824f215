"""Stage 1, on a hit: the pre-dispatch trace of a graph Dynamo handed over before (Note [The capture cache])."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from .capture import capture_graph_module

# Note [The capture cache]
# Dynamo hands the backend the same graph again after ``torch._dynamo.reset()`` or for another frame with the same
# code; the pre-dispatch trace of that graph is then the same graph. It is kept, per process (a new process with
# a warm on-disk AOTAutograd cache still traces once), for graphs whose trace depends only on the key below:
# Dynamo's code, and per input its type and, for a tensor, its metadata (sizes, strides, offset, dtype, device,
# layout, requires_grad, which other input shares its storage), and the grad mode. Not kept: a graph with symbolic sizes
# (its trace holds the symbols of one ShapeEnv), or with submodules or get_attr constants (the trace would hold the
# old graph's tensors). The stages after the capture copy the graph, never edit it, so one trace serves every hit.
_CAPTURES: collections.OrderedDict[tuple[Any, ...], fx.GraphModule] = collections.OrderedDict()
_CAPTURES_KEPT = 64


def capture_graph_module_once(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> fx.GraphModule:
    """capture_graph_module, or the trace of an equal graph made earlier in this process (Note [The capture
    cache])."""
    key = _capture_key(gm, example_inputs)
    if key is not None and (hit := _CAPTURES.get(key)) is not None:
        _CAPTURES.move_to_end(key)
        return hit
    captured = capture_graph_module(gm, example_inputs)
    if key is not None:
        _CAPTURES[key] = captured
        while len(_CAPTURES) > _CAPTURES_KEPT:
            _CAPTURES.popitem(last=False)
    return captured


def _capture_key(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> tuple[Any, ...] | None:
    if any(True for _ in gm.children()) or any(n.op == "get_attr" for n in gm.graph.nodes):
        return None
    storages: dict[Any, int] = {}
    key: list[Any] = [gm.code, torch.is_grad_enabled(), torch.is_inference_mode_enabled()]
    for p, x in zip(gm.graph.find_nodes(op="placeholder"), example_inputs):
        value = p.meta.get("example_value")
        if (isinstance(value, torch.Tensor) and _symbolic(value)) or isinstance(value, torch.SymInt):
            return None
        if isinstance(x, torch.Tensor):
            if x.layout != torch.strided or _symbolic(x):
                return None
            alias = storages.setdefault(ti.storage_ref(x), len(storages))
            key.append((tuple(x.shape), x.stride(), x.storage_offset(), x.dtype, x.device, x.requires_grad, alias))
        elif x is None or isinstance(x, (bool, int, float, str)):
            key.append((type(x), x))
        else:
            return None
    return tuple(key)


def _symbolic(t: torch.Tensor) -> bool:
    return any(isinstance(d, torch.SymInt) for d in (*t.shape, *t.stride(), t.storage_offset()))
