"""Calls recorded as one node of a make_fx trace (a custom autograd.Function, a checkpointed region), and what
their bodies do that the rules cannot see from outside (private proxy-tensor and dispatch-mode APIs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode


def record_opaque_call(
    target: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    node_meta: Callable[[Any], dict[str, Any]] | None = None,
    run: Callable[..., Any] | None = None,
) -> Any:
    """Inside a make_fx trace, record ``target(*args, **kwargs)`` as one node instead of tracing through it, as
    torch's own higher-order ops do under proxy tracing (``trace_cond``); graph-module arguments become submodules
    of the traced graph. The result is computed on the fake inputs with tracing off (by ``run`` where given: the
    target under a watch)."""
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, get_proxy_mode, track_tensor_tree

    mode = get_proxy_mode()
    if mode is None:
        return target(*args, **kwargs)
    tracer = mode.tracer
    for arg in args:
        if isinstance(arg, torch.fx.GraphModule) and all(m is not arg for m in tracer.root.children()):
            index = sum(1 for _ in tracer.root.children())
            while hasattr(tracer.root, f"opaque_body_{index}"):
                index += 1
            tracer.root.register_module(f"opaque_body_{index}", arg)
    # Grad-mode changes inside the call must not be recorded either (the pre-dispatch mode is a torch function mode).
    with disable_proxy_modes_tracing(), torch._C.DisableTorchFunction():
        out = (run or target)(*args, **kwargs)
    proxy_args = pytree.tree_map(tracer.unwrap_proxy, args)
    proxy = tracer.create_proxy("call_function", target, proxy_args, kwargs)
    if node_meta is not None:  # facts about the call found on its result (``node_meta(out)``)
        proxy.node.meta.update(node_meta(out))
    return track_tensor_tree(out, proxy, constant=None, tracer=tracer)


class _EffectWatch(TorchDispatchMode):
    """Notes whether the ops run under it draw random numbers, have a side effect fx knows of, or write a tensor
    sharing storage with one of the watched inputs."""

    def __init__(self, inputs: list[torch.Tensor]) -> None:
        super().__init__()
        self.storages = {StorageWeakRef(t.untyped_storage()) for t in inputs}
        self.found = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        schema = func._schema
        random = torch.Tag.nondeterministic_seeded in func.tags
        effect = not schema.is_mutable and bool(torch.fx.node._side_effectful_functions & {func, func.overloadpacket})
        writes = schema.is_mutable and any(
            StorageWeakRef(t.untyped_storage()) in self.storages for t in _written(schema, args, kwargs)
        )
        self.found = self.found or random or effect or writes
        return func(*args, **kwargs)


def _written(schema: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    values = [*args, *(kwargs.get(a.name) for a in schema.arguments[len(args) :])]
    written = [v for a, v in zip(schema.arguments, values) if a.alias_info is not None and a.alias_info.is_write]
    return [t for v in written for t in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(t, torch.Tensor)]


def watching_effects(
    fn: Callable[..., Any], inputs: list[torch.Tensor]
) -> tuple[Callable[..., Any], Callable[[], bool]]:
    """``fn`` run under a watch for random draws, fx's side effects and writes of ``inputs``' storages, and the
    watch's answer: True where it saw one, or where ``fn`` did not return (the conservative answer). Note
    [Independent parts of the core] in slicing.py: a custom Function whose forward has none needs no order kept."""
    watch = _EffectWatch(inputs)
    returned = False

    def watched(*args: Any, **kwargs: Any) -> Any:
        nonlocal returned
        with watch:
            out = fn(*args, **kwargs)
        returned = True
        return out

    return watched, lambda: watch.found or not returned
