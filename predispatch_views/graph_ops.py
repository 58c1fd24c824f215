"""What a pre-dispatch graph node is, read from the op's schema: view, mutation, size arithmetic."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti

aten = torch.ops.aten

# Ops whose schema says "alias" but that are not views a user can observe as such.
_NOT_VIEWS = {aten.lift_fresh.default}
# Metadata mutations that also change storage: functionalization cannot express them and eager replay of the
# rest would see a different storage.
STORAGE_MUTATIONS = {"resize_", "resize_as_", "set_"}
_SYM_TARGETS: set[Any] = {
    aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default, aten.sym_storage_offset.default,
    operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod, operator.neg,
    operator.pow, operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
    math.ceil, math.floor, torch.sym_int, torch.sym_float, torch.sym_max, torch.sym_min, torch.sym_not,
}  # fmt: skip


def _overload(node: fx.Node) -> ti.OpOverload | None:
    if node.op == "call_function" and isinstance(node.target, ti.OpOverload):
        return node.target
    return None


def is_view(node: fx.Node) -> bool:
    """A call whose result aliases its first argument without writing to it (unbind, t, view, chunk...).

    Includes calls whose schema promises a fresh tensor but that return their input as it is; see
    Note [Ops that return their input].
    """
    op = _overload(node)
    if op is None or op in _NOT_VIEWS:
        return False
    schema = ti.schema_of(op)
    if schema.is_mutable or not schema.arguments or not schema.returns:
        return False
    first = schema.arguments[0].alias_info
    if first is not None and all(r.alias_info is not None for r in schema.returns):
        return True
    return returns_its_input(node)


# Note [Ops that return their input]
# Some composite ops are declared as returning a new tensor but return ``self`` itself when they have nothing
# to do: ``dropout`` in eval mode or with p=0, ``type_as`` to the same dtype, ``atleast_1d`` of a 1-d tensor,
# ``sum_to_size`` to the same size, ``conj_physical`` of a real tensor. In eager the result is then the very
# input tensor (a view stays a view, and shares its version counter). Compiled code that computes them
# returns a fresh tensor, so the epilogue must replay them like views. Pre-dispatch tracing runs their
# composite bodies on fake tensors, so the traced value shares its input's storage -- except for the dropout
# family, whose fake kernel always allocates: for those the arguments decide (at::dropout returns its input
# when ``p == 0`` or ``not train``).
_DROPOUTS = {"dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"}


def returns_its_input(node: fx.Node) -> bool:
    op = _overload(node)
    if op is None or ti.schema_of(op).is_mutable or not node.args or not isinstance(node.args[0], fx.Node):
        return False
    if _name(op) in _DROPOUTS:
        p, train = [*node.args[1:3], None, None][:2]
        return p == 0 or train is False
    return _traced_pair(node) is not None


def is_dropout(node: fx.Node) -> bool:
    op = _overload(node)
    return op is not None and _name(op) in _DROPOUTS


def is_input_returned_by_a_fresh_op(node: fx.Node) -> bool:
    """An op whose schema promises a fresh tensor but that returns its input itself here (Note [Ops that return
    their input]): ``dropout`` with p=0 or in eval, ``type_as`` to the same dtype... Its value is its input's, so
    a reader may read the input instead. Not a declared view with the input's geometry: ``_conj``, ``_neg_view``
    or ``view(dtype)`` keep the geometry and change the values."""
    op = _overload(node)
    return op is not None and ti.schema_of(op).arguments[0].alias_info is None and returns_its_input(node)


def _traced_pair(node: fx.Node) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The traced value of ``node`` and of its first argument, when they share storage."""
    value, first = node.meta.get("val"), node.args[0].meta.get("val")  # type: ignore[union-attr]
    tensors = isinstance(value, torch.Tensor) and isinstance(first, torch.Tensor)
    if tensors and ti.storage_id(value) == ti.storage_id(first):
        return value, first
    return None


def _name(op: Any) -> str:
    """``aten::add_`` -> ``add_``."""
    return ti.schema_of(op).name.split("::")[-1]


def may_return_self(node: fx.Node) -> bool:
    """A view call that may return its input tensor itself rather than a new view of it.

    Either Note [Ops that return their input], or a view whose traced value has its input's exact geometry
    (``contiguous`` of a contiguous tensor, ``flatten`` of a 1-d one): fake values cannot tell a new view with
    the same geometry from the input itself, so both count.
    """
    op = _overload(node)
    if op is None or not is_view(node):
        return False
    if ti.schema_of(op).arguments[0].alias_info is None:
        return True
    if (pair := _traced_pair(node)) is None:
        return False
    value, first = pair
    geometry = (first.storage_offset(), first.shape, first.stride())
    return (value.storage_offset(), value.shape, value.stride()) == geometry  # symbolic sizes: no hashing


def backward_reads_no_input(node: fx.Node) -> bool:
    """An ATen call (or a custom Function's) whose backward reads no value, neither an input nor its result (``add``,
    ``mul`` by a number, ``sum``, ``cat``...): nothing is saved for it (Note [Which ops save their result])."""
    saved = saved_by_backward(node) if _overload(node) is not None or is_function_apply(node) else None
    return saved is not None and not saved[0] and not saved[1]


def backward_reads_its_result(node: fx.Node) -> bool:
    """An ATen call (or a custom Function's) whose backward reads its output, as eager saves it (Note [Which ops save
    their result], asked of torch rather than of a table). False for any other call."""
    known = _overload(node) is not None or is_function_apply(node)
    saved = saved_by_backward(node) if known else (set(), False)
    return saved is None or saved[1]


def saved_by_backward(node: fx.Node) -> tuple[set[fx.Node], bool] | None:
    """The arguments a call's backward reads, and whether it reads its result; None where unknown. An ATen call,
    or a torch-level call of Dynamo's graph (a function or a ``torch.Tensor`` method), or a custom Function's."""
    if is_function_apply(node):  # Note [What a custom Function's backward reads] in _torch_internals/opaque_calls.py
        return ti.function_backward_reads(node)
    reads = _backward_reads(node)
    if reads is None:
        return None
    leaves = ti.tree_leaves((node.args, node.kwargs))
    return {leaves[k] for k in reads.inputs if isinstance(leaves[k], fx.Node)}, reads.result


def _backward_reads(node: fx.Node) -> Any:
    if (op := callable_of(node)) is None:
        return None
    args, kwargs = fx.node.map_aggregate((node.args, node.kwargs), example_value)
    return ti.backward_reads(op, args, kwargs)


def callable_of(node: fx.Node) -> Any:
    """What an ATen call, or a torch-level call of Dynamo's graph, calls (None for ``getitem`` and the rest)."""
    op: Any = _overload(node)
    if op is None and node.op == "call_method":
        op = getattr(torch.Tensor, str(node.target), None)
    elif op is None and node.op == "call_function" and node.target is not operator.getitem:
        op = node.target
    return op if callable(op) else None


def example_value(a: Any) -> Any:
    return a.meta.get("val", a.meta.get("example_value")) if isinstance(a, fx.Node) else a


def is_random(node: fx.Node) -> bool:
    """An op that draws from the RNG (uniform_, bernoulli_, dropout_...): replaying it in eager draws again. Not a
    dropout that returns its input (p=0 or not train): at::dropout returns before it draws (fuzzer s1312_48)."""
    op = _overload(node)
    if op is None or torch.Tag.nondeterministic_seeded not in op.tags:
        return False
    return not (_name(op) in _DROPOUTS and returns_its_input(node))


def reaching(roots: Iterable[fx.Node]) -> set[fx.Node]:
    """``roots`` and every node they read, transitively (what a liveness question keeps)."""
    live: set[fx.Node] = set()
    stack = list(roots)
    while stack:
        if (n := stack.pop()) not in live:
            live.add(n)
            stack.extend(n.all_input_nodes)
    return live


def descendants(node: fx.Node) -> set[fx.Node]:
    """Every node that reads ``node``, transitively (``node`` not included)."""
    found: set[fx.Node] = set()
    stack = list(node.users)
    while stack:
        if (n := stack.pop()) not in found:
            found.add(n)
            stack.extend(n.users)
    return found


def draws_random(node: fx.Node) -> bool:
    """``is_random``, also for a torch-level call of Dynamo's graph (``torch.rand``, ``F.dropout``, ``x.uniform_``)."""
    if is_random(node):
        return True
    if node.op not in ("call_function", "call_method") or _overload(node) is not None:
        return False
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if not isinstance(name, str) or name.startswith("__"):
        return False
    packet = getattr(torch.ops.aten, name[:-1] if name.endswith("_") else name, None)
    overloads = packet.overloads() if hasattr(packet, "overloads") else []
    return any(torch.Tag.nondeterministic_seeded in getattr(packet, o).tags for o in overloads)


def is_multi_output_view(node: fx.Node) -> bool:
    op = _overload(node)
    return is_view(node) and op is not None and isinstance(ti.schema_of(op).returns[0].type, torch.ListType)


def is_view_getitem(node: fx.Node) -> bool:
    """``outs[i]`` of a multi-output view call."""
    return (
        node.op == "call_function"
        and node.target is operator.getitem
        and isinstance(node.args[0], fx.Node)
        and is_multi_output_view(node.args[0])
    )


def _written_values(node: fx.Node) -> list[Any]:
    """The arguments a call's schema marks as written (``Tensor(a!)``), as passed: a node, a list of nodes...; for
    a recorded custom Function, the arguments it marks dirty (``DIRTY_ARGS``)."""
    op = _overload(node)
    if op is None and node.op == "call_function" and DIRTY_ARGS in node.meta:
        return [node.args[i] for i in node.meta[DIRTY_ARGS]]
    if op is None or not ti.schema_of(op).is_mutable:
        return []
    return [
        node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        for i, arg in enumerate(ti.schema_of(op).arguments)
        if arg.alias_info is not None and arg.alias_info.is_write
    ]


def mutated_input(node: fx.Node) -> fx.Node | None:
    """The tensor an in-place or out= call writes to, if any (the first, where a call writes several)."""
    return next((v for v in _written_values(node) if isinstance(v, fx.Node)), None)


def written_args(node: fx.Node) -> list[fx.Node]:
    """Every tensor a call's schema says it writes (out= and foreach calls write several)."""
    return [
        v
        for value in _written_values(node)
        for v in (value if isinstance(value, (list, tuple)) else [value])
        if isinstance(v, fx.Node)
    ]


def is_aten_call(node: fx.Node) -> bool:
    """A call of an ATen (or other registered) op overload: its schema says what it reads and writes."""
    return _overload(node) is not None


def has_ordered_effect(node: fx.Node) -> bool:
    """A call whose effect is not only on its arguments: it draws random numbers, or fx counts it side-effecting
    without writing an argument (``_assert_async``, profiler records...). Such calls keep their order."""
    op = _overload(node)
    return op is not None and (is_random(node) or (node.is_impure() and not ti.schema_of(op).is_mutable))


def is_metadata_mutation(node: fx.Node) -> bool:
    """t_, transpose_, squeeze_, as_strided_... (torch tags them inplace_view)."""
    op = _overload(node)
    return op is not None and torch.Tag.inplace_view in op.tags


def out_of_place(op: ti.OpOverload) -> ti.OpOverload | None:
    """The op with the same arguments that does not write: t_ -> t, transpose_ -> transpose.int, add_ -> add."""
    name = _name(op)
    packet = getattr(aten, name.rstrip("_"), None)
    if not name.endswith("_") or packet is None:
        return None
    wanted = [str(a.type) for a in ti.schema_of(op).arguments]
    for overload in packet.overloads():
        candidate = getattr(packet, overload)
        if [str(a.type) for a in ti.schema_of(candidate).arguments] == wanted:
            return candidate
    return None


def is_data_mutation(node: fx.Node) -> bool:
    return mutated_input(node) is not None and not is_metadata_mutation(node)


def is_storage_mutation(node: fx.Node) -> bool:
    """``resize_``, ``set_``..., or an out= call that resizes its out tensor (eager warns and resizes it, growing
    a view's storage in place: fuzzer s61_95, ``torch.exp(x, out=a.narrow(0, 0, 1))``)."""
    op = _overload(node)
    if op is None:
        return False
    if _name(op) in STORAGE_MUTATIONS:
        return True
    return _is_out_variant(op) and bool(resized_args(node))


def resized_args(node: fx.Node) -> list[fx.Node]:
    """The out tensors of an out= call that it resizes (the others it writes in place, as any in-place call)."""
    results = node.meta.get("val")
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    return [
        a
        for a, r in zip(written_args(node), results)
        if isinstance(w := a.meta.get("val"), torch.Tensor) and isinstance(r, torch.Tensor) and not _same_shape(w, r)
    ]


def _is_out_variant(op: ti.OpOverload) -> bool:
    return any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write for a in ti.schema_of(op).arguments)


def _same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dim() == b.dim() and all(x == y for x, y in zip(a.shape, b.shape))  # symbolic sizes: no hashing


def is_sym(node: fx.Node) -> bool:
    """Size arithmetic (sym_size, operator.floordiv...) whose value is a number, not a tensor."""
    is_tensor = isinstance(node.meta.get("val"), torch.Tensor)
    return node.op == "call_function" and node.target in _SYM_TARGETS and not is_tensor


# Node meta of a recorded call that must run in eager, between compiled segments (Note [Segments] in segments.py):
# what it is ("a custom autograd.Function", "a checkpointed region"). Set by capture.record_custom_function.
RUN_EAGERLY = "predispatch_views_run_eagerly"

# Node meta of a recorded custom Function that marks inputs dirty (``ctx.mark_dirty``: written in place and
# returned): the positions of those arguments. It runs in eager too; written_args names them.
DIRTY_ARGS = "predispatch_views_dirty_args"


# Node meta of every call capture.record_custom_function recorded as one opaque node (a custom autograd.Function,
# a checkpointed region): what it is. Dynamo's own graphs call such a body through its higher-order op instead.
OPAQUE_CALL = "predispatch_views_opaque_call"
EFFECT_FREE = "predispatch_views_effect_free"  # its body draws no random number and writes no input (slicing.py)


def is_opaque_call(node: fx.Node) -> bool:
    """A custom Function or a checkpointed region, recorded as one node whose body the rules do not read."""
    if node.op != "call_function":
        return False
    return OPAQUE_CALL in node.meta or node.target in (ti.AUTOGRAD_FUNCTION_APPLY, ti.ACTIVATION_CHECKPOINT)


def requires_grad_set(x: torch.Tensor) -> torch.Tensor:
    """Note [requires_grad_ inside a function]
    ``x.requires_grad_(True)`` (or ``x.requires_grad = True``) changes no element, so the trace would drop it and
    every later op would compute as if ``x`` needed no gradient. The capture records it as one call of this function
    that returns ``x`` itself (like a custom Function marking ``x`` dirty: ``DIRTY_ARGS``), run in eager between
    two compiled segments (Note [Segments]): the real ``x`` then requires grad, as a leaf, where eager's does, and
    the segment after it is compiled for an ``x`` requiring grad (graph_meta.py counts the call's result and its
    argument as requiring grad). ``requires_grad_(False)``, which eager allows on leaves only, is still refused."""
    return x.requires_grad_(True)


def sets_requires_grad(node: fx.Node) -> bool:  # Note [requires_grad_ inside a function]
    return node.op == "call_function" and node.target is requires_grad_set


def is_function_apply(node: fx.Node) -> bool:  # Dynamo's higher-order op for a custom autograd.Function
    return node.op == "call_function" and node.target is ti.AUTOGRAD_FUNCTION_APPLY


def runs_eagerly(node: Any) -> str | None:
    """What a recorded call that must run in eager is, or None."""
    return node.meta.get(RUN_EAGERLY) if isinstance(node, fx.Node) and node.op == "call_function" else None


def is_grad_mode_change(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target is ti.SET_GRAD_ENABLED


def schema_name(node: fx.Node) -> str | None:
    """``aten::view_as_real`` -> ``view_as_real``; None for a call that is no op overload (``getitem``)."""
    op = _overload(node)
    return _name(op) if op is not None else None


def op_name(node: fx.Node) -> str:
    op = _overload(node)
    if op is not None:
        return str(op)
    return getattr(node.target, "__name__", str(node.target))


def as_tuple(outputs: Any) -> tuple[Any, ...]:
    """An output node's argument as a tuple (a graph may return one value bare)."""
    return tuple(outputs) if isinstance(outputs, (list, tuple)) else (outputs,)
