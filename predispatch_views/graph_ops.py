"""What a pre-dispatch graph node is, read from the op's schema: view, mutation, size arithmetic."""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti

aten = torch.ops.aten

# Ops whose schema says "alias" but that are not views a user can observe as such.
_NOT_VIEWS = {aten.lift_fresh.default}
# Metadata mutations that also change storage: functionalization cannot express them and eager replay of the
# rest would see a different storage.
_STORAGE_MUTATIONS = {"resize_", "resize_as_", "set_"}
_SYM_TARGETS: set[Any] = {
    aten.sym_size.int,
    aten.sym_stride.int,
    aten.sym_numel.default,
    aten.sym_storage_offset.default,
    operator.add,
    operator.sub,
    operator.mul,
    operator.floordiv,
    operator.truediv,
    operator.mod,
    operator.neg,
    operator.pow,
    operator.eq,
    operator.ne,
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
    math.ceil,
    math.floor,
    torch.sym_int,
    torch.sym_float,
    torch.sym_max,
    torch.sym_min,
    torch.sym_not,
}


def _overload(node: fx.Node) -> torch._ops.OpOverload | None:
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        return node.target
    return None


def is_view(node: fx.Node) -> bool:
    """A call whose result aliases its first argument without writing to it (unbind, t, view, chunk...)."""
    op = _overload(node)
    if op is None or op in _NOT_VIEWS:
        return False
    schema = op._schema
    if schema.is_mutable or not schema.arguments or not schema.returns:
        return False
    first = schema.arguments[0].alias_info
    return first is not None and all(r.alias_info is not None for r in schema.returns)


def is_multi_output_view(node: fx.Node) -> bool:
    op = _overload(node)
    return is_view(node) and op is not None and isinstance(op._schema.returns[0].type, torch.ListType)


def is_view_getitem(node: fx.Node) -> bool:
    """``outs[i]`` of a multi-output view call."""
    return (
        node.op == "call_function"
        and node.target is operator.getitem
        and isinstance(node.args[0], fx.Node)
        and is_multi_output_view(node.args[0])
    )


def mutated_input(node: fx.Node) -> fx.Node | None:
    """The tensor an in-place or out= call writes to, if any."""
    op = _overload(node)
    if op is None or not op._schema.is_mutable:
        return None
    for i, arg in enumerate(op._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            if isinstance(value, fx.Node):
                return value
    return None


def is_metadata_mutation(node: fx.Node) -> bool:
    """t_, transpose_, squeeze_, as_strided_... (torch tags them inplace_view)."""
    op = _overload(node)
    return op is not None and torch.Tag.inplace_view in op.tags


def out_of_place(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The op with the same arguments that does not write: t_ -> t, transpose_ -> transpose.int, add_ -> add."""
    name = op._schema.name.split("::")[-1]
    packet = getattr(aten, name.rstrip("_"), None)
    if not name.endswith("_") or packet is None:
        return None
    wanted = [str(a.type) for a in op._schema.arguments]
    for overload in packet.overloads():
        candidate = getattr(packet, overload)
        if [str(a.type) for a in candidate._schema.arguments] == wanted:
            return candidate
    return None


def is_data_mutation(node: fx.Node) -> bool:
    return mutated_input(node) is not None and not is_metadata_mutation(node)


def is_storage_mutation(node: fx.Node) -> bool:
    op = _overload(node)
    return op is not None and op._schema.name.split("::")[-1] in _STORAGE_MUTATIONS


def is_sym(node: fx.Node) -> bool:
    """Size arithmetic (sym_size, operator.floordiv...) whose value is a number, not a tensor."""
    return node.op == "call_function" and node.target in _SYM_TARGETS and not _is_tensor_val(node)


def is_grad_mode_change(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target is ti.SET_GRAD_ENABLED


def _is_tensor_val(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.Tensor)


def op_name(node: fx.Node) -> str:
    op = _overload(node)
    if op is not None:
        return str(op)
    return getattr(node.target, "__name__", str(node.target))
