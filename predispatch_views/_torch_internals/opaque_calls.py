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


def function_backward_reads(node: torch.fx.Node) -> tuple[set[torch.fx.Node], bool] | None:
    """What the backward of Dynamo's ``autograd_function_apply`` call reads: the call's tensor arguments and whether
    its result, or None where unknown.

    Note [What a custom Function's backward reads]
    Dynamo traces an autograd.Function into two graphs, ``fwd_body(*operands) -> (results, saved)`` and
    ``bwd_body(*grads, *saved)``: everything the backward reads of the forward (``ctx.save_for_backward`` and
    tensors stashed on ``ctx``) is an entry of ``saved`` (torch 2.13 and 2.14, ``AutogradFunctionApplyVariable``).
    A saved entry the backward graph uses and that shares storage with an operand reads that operand, one sharing
    storage with a result reads the result (a ``mark_dirty`` input is both), and one computed inside the forward is
    a tensor nothing outside the call can write. ``MarkDirty``'s ``x.mul_(2)`` saves nothing: a write to its
    result afterwards breaks no backward of it, where the rules used to assume any Function saves everything
    (fuzzer s1824_240, s1824_773)."""
    from torch.fx import Node

    fwd_attr, bwd_attr, *operands = node.args
    owner = node.graph.owning_module
    if owner is None or not all(isinstance(a, Node) and a.op == "get_attr" for a in (fwd_attr, bwd_attr)):
        return None
    fwd, bwd = (getattr(owner, str(a.target), None) for a in (fwd_attr, bwd_attr))  # type: ignore[union-attr]
    if not isinstance(fwd, torch.fx.GraphModule) or not isinstance(bwd, torch.fx.GraphModule):
        return None
    fwd_inputs = list(fwd.graph.find_nodes(op="placeholder"))
    bwd_inputs = list(bwd.graph.find_nodes(op="placeholder"))
    out = fwd.graph.output_node().args[0]
    if len(fwd_inputs) != len(operands) or not isinstance(out, (tuple, list)) or len(out) != 2:
        return None
    results, saved = pytree.tree_leaves(out[0]), pytree.tree_leaves(out[1])
    if len(bwd_inputs) != len(results) + len(saved):
        return None

    def storage(n: Any) -> StorageWeakRef | bool | None:  # None: no tensor; False: unknown
        value = n.meta.get("example_value", n.meta.get("val")) if isinstance(n, Node) else n
        if isinstance(value, torch.Tensor):
            return StorageWeakRef(value.untyped_storage())
        return None if value is None or isinstance(value, (int, float, bool, torch.SymInt)) else False

    operand_storages = [storage(p) for p in fwd_inputs]
    result_storages = {storage(r) for r in results}
    reads: set[torch.fx.Node] = set()
    reads_result = False
    for value, placeholder in zip(saved, bwd_inputs[len(results) :]):
        if not placeholder.users or (s := storage(value)) is None:
            continue
        if s is False:
            return None
        reads |= {a for a, o in zip(operands, operand_storages) if o == s and isinstance(a, Node)}
        reads_result |= s in result_storages
    return reads, reads_result
