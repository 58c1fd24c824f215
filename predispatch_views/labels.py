"""Which program a FALLBACKS entry is about: the user's function and where it is, not ``GraphModule``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch import fx

from . import _torch_internals as ti

# graph.meta key: set by the no-Dynamo entry points (compile_function, explain) on the graph they capture.
LABEL_KEY = "predispatch_views_label"


def function_label(fn: Callable[..., Any]) -> str:
    """``qualname (file:line)`` of a function, or of an nn.Module's forward."""
    target: Any = getattr(fn, "forward", fn) if not inspect.isfunction(fn) else fn
    target = inspect.unwrap(target)
    name = getattr(target, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    code = getattr(target, "__code__", None)
    return name if code is None else f"{name} ({code.co_filename}:{code.co_firstlineno})"


def graph_label(gm: fx.GraphModule) -> str:
    """The label an entry point put on the graph, else Dynamo's frame (function, file:line where the graph
    ends, compile id), else the graph's class name."""
    label = gm.meta.get(LABEL_KEY) if isinstance(getattr(gm, "meta", None), dict) else None
    if label:
        return str(label)
    origin = ti.dynamo_graph_origin(gm)
    if origin is not None:
        name, filename, lineno, compile_id = origin
        return f"{name} ({filename}:{lineno}, graph {compile_id})" if compile_id else f"{name} ({filename}:{lineno})"
    return type(gm).__name__
