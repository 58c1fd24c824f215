"""The torch.compile backend: ``torch.compile(fn, backend="predispatch_views")``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import fx

from . import _torch_internals as ti
from .pipeline import InnerBackend, compile_dynamo_graph

BACKEND_NAME = "predispatch_views"


def backend(inner: InnerBackend = "inductor", *, strict: bool = False) -> Callable[..., Any]:
    """A backend callable for torch.compile.

    inner: the backend that compiles the core ("inductor", "aot_eager", "eager", or any backend callable).
    strict: raise instead of falling back to stock AOTAutograd (for tests and debugging).
    """

    def predispatch_views_backend(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        return compile_dynamo_graph(gm, example_inputs, inner, strict=strict).run

    predispatch_views_backend.inner = inner  # type: ignore[attr-defined]
    predispatch_views_backend.is_predispatch_views = True  # type: ignore[attr-defined]
    # Note [An inlined Function returns its input as eager does] (dynamo_traced_code.py), for this backend only.
    ti.install_inlined_function_returns(_is_this_backend)
    return predispatch_views_backend


def _is_this_backend(compiler_fn: Any) -> bool:
    return getattr(compiler_fn, "is_predispatch_views", False)


# What the ``torch_dynamo_backends`` entry point and ``register()`` name "predispatch_views".
default_backend = backend()


def register() -> None:
    """Make the name known to Dynamo; see Note [Registering with and without the entry point]."""
    ti.register_backend_once(default_backend, BACKEND_NAME)
