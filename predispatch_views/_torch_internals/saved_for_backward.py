"""What an op's backward reads, asked of torch itself: the op and its backward traced once, as AOTAutograd traces
a joint graph, instead of a hand-written table of derivative formulas.

Note [Which ops save their result]
Eager saves an op's output for backward where its derivative formula reads ``result`` (derivatives.yaml:
``tanh``, ``exp``, ``sigmoid``, ``tan``, ``amax``, ``std``...). A compiled region saves it there too, and a later
in-place write to it then makes the backward raise. ``backward_reads`` traces ``op`` on meta tensors of the
call's shapes and dtypes, every floating input requiring grad (a superset of what any call asks: more inputs
requiring grad only adds reads), then ``autograd.grad`` of its outputs, with ``make_fx``; the result is read where
a node of the backward consumes an output of the forward (through ``detach``, ``alias`` or ``getitem``: autograd
unpacks a saved output as a detached alias); an input is read where a node of the backward consumes it or a
forward value computed from it (a superset of what eager saves). Any failure to trace answers "anything may be
read", the conservative answer. The answers are cached per op and input signature.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.experimental.proxy_tensor import make_fx

_ALIASES = {operator.getitem, torch.ops.aten.detach.default, torch.ops.aten.alias.default}


def _hint(x: Any) -> Any:
    """A concrete value for a size (a SymInt's or SymFloat's hint); anything else as it is."""
    if isinstance(x, (torch.SymInt, torch.SymFloat)):
        return x.node.hint if x.node.hint is not None else (2 if isinstance(x, torch.SymInt) else 2.0)
    return x


def _signature(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(_hint(s) for s in value.shape), value.dtype, str(value.device))
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v) for v in value)
    return ("value", repr(_hint(value)))


@dataclass(frozen=True)
class BackwardReads:
    """What one call's backward reads: its tensor inputs (positions among the pytree leaves of ``(args, kwargs)``)
    and whether its result."""

    inputs: frozenset[int]
    result: bool


_UNKNOWN = BackwardReads(frozenset(), True)  # ``unknown`` below: the conservative answer


def backward_reads_result(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``op(*args, **kwargs)``'s backward reads its output (Note [Which ops save their result]). ``args``
    hold example values (fake tensors, SymInts) where the graph had nodes."""
    reads = backward_reads(op, args, kwargs)
    return reads is None or reads.result


def backward_reads(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> BackwardReads | None:
    """What ``op(*args, **kwargs)``'s backward reads (Note [Which ops save their result]); None where tracing it
    failed: anything may be read."""
    return _cached(_ANSWERS, _reads, op, args, kwargs)


_ANSWERS: dict[Any, BackwardReads | None] = {}


def _cached(cache: dict[Any, Any], compute: Any, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``compute(op, args, kwargs)``, kept per op and input signature; None where the signature is unhashable."""
    try:
        key = (op, _signature(args), _signature(tuple(sorted(kwargs.items()))))
        hash(key)
    except TypeError:
        return None
    if key not in cache:
        cache[key] = compute(op, args, kwargs)
    return cache[key]


def _reads(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> BackwardReads | None:
    """A symbolic number (``mul`` by a SymInt under dynamic shapes) is traced as its hint, and again as the hint plus
    one: a backward formula may read nothing for one value (``pow`` by 0) and an input for the others. The union of
    both answers, or None where either trace fails."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    symbolic = [k for k, v in enumerate(leaves) if isinstance(v, (torch.SymInt, torch.SymFloat))]
    answers = []
    for shift in (0, 1) if symbolic else (0,):
        concrete = [_hint(v) + shift if k in symbolic else v for k, v in enumerate(leaves)]
        answers.append(_reads_of(op, concrete, spec))
    if any(a is None for a in answers):
        return None
    return BackwardReads(frozenset().union(*(a.inputs for a in answers)), any(a.result for a in answers))


def _reads_of(op: Any, leaves: list[Any], spec: Any) -> BackwardReads | None:
    args, kwargs = pytree.tree_unflatten(leaves, spec)
    positions = [k for k, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
    written = _written_leaves(op, args, kwargs)
    schema = getattr(op, "_schema", None)
    out_names = {a.name for a in schema.arguments if a.is_out} if schema is not None else set()

    def example(t: torch.Tensor) -> torch.Tensor:
        e = torch.empty([_hint(s) for s in t.shape], dtype=t.dtype, device="meta")
        return e.requires_grad_(e.is_floating_point() or e.is_complex())

    def joint(*tensors: torch.Tensor) -> Any:
        filled = list(leaves)
        for k, t in zip(positions, tensors):
            # A leaf requiring grad refuses an in-place write: the op writes a clone (read as the input below).
            filled[k] = t.clone() if k in written and t.requires_grad and not out_names else t
        call_args, call_kwargs = pytree.tree_unflatten(filled, spec)
        if out_names:  # autograd refuses out= calls: the functional overload computes the same (the out= result)
            call_kwargs = {k: v for k, v in call_kwargs.items() if k not in out_names}
            out = op.overloadpacket(*call_args, **call_kwargs)
        else:
            out = op(*call_args, **call_kwargs)
        outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
        wanted = [t for t in tensors if t.requires_grad]
        if not outs or not wanted:
            return (out,)
        ones = [torch.ones(o.shape, dtype=o.dtype, device=o.device) for o in outs]
        return (out, torch.autograd.grad(outs, wanted, ones, allow_unused=True))

    try:
        # Meta tensors traced as real ones: no fake mode, so no symbolic size joins the shape environment of a
        # compile in progress (a guard on a size with no source breaks Dynamo's guard creation). Out of
        # inference_mode, whatever mode the caller is in: under it autograd records nothing, and the answer
        # "reads nothing" would be cached for every later caller (fuzzer s1801_3: compile_function called under
        # inference_mode answered it for ``exp``, and a later compile with grad on kept a write it must refuse).
        # Out of anomaly mode too: under it the trace fails, and "anything may be read" would be cached.
        with torch.inference_mode(False), torch.enable_grad(), _no_anomaly(), unset_fake_temporarily():
            gm = make_fx(joint, tracing_mode="real")(*[example(leaves[k]) for k in positions])
    except Exception:
        return None
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    output = gm.graph.output_node()
    results = {n for n in pytree.tree_leaves(output.args[0][0]) if isinstance(n, torch.fx.Node)}
    forward: set[torch.fx.Node] = set()  # what the op's outputs are computed from
    stack = list(results)
    while stack:
        n = stack.pop()
        if n not in forward:
            forward.add(n)
            stack.extend(n.all_input_nodes)
    # Each value -> the inputs and outputs it is computed from in the forward (a forward intermediate the backward
    # reads counts as reading what it came from: a superset of what eager saves).
    origin: dict[torch.fx.Node, frozenset[Any]] = {p: frozenset({k}) for p, k in zip(placeholders, positions)}
    origin.update({r: frozenset({_RESULT}) for r in results})
    read: set[Any] = set()
    for n in nodes:  # in order: a value's origin is known before anything reads it
        if n.op != "call_function" or n in results or n.target in _SHAPE_ONLY:
            continue  # a size read under an ambient shape environment reads no value
        sources = frozenset().union(*(origin.get(i, frozenset()) for i in n.all_input_nodes))
        if n in forward or n.target in _ALIASES:  # autograd unpacks a saved output as a detached alias
            origin[n] = sources
        else:
            read |= sources  # a node of the backward reads it
    return BackwardReads(frozenset(k for k in read if k != _RESULT), _RESULT in read)


def _no_anomaly() -> Any:
    return torch.autograd.set_detect_anomaly(False)


def eager_node_name(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The name eager's autograd error messages give the node ``op(*args, **kwargs)`` records ("Tanh" for
    ``TanhBackward0``); None where the call records none or fails on meta tensors. Cached per op and signature."""
    return _cached(_NAMES, _node_name, op, args, kwargs)


_NAMES: dict[Any, str | None] = {}


def _node_name(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    def example(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return _hint(t)
        e = torch.empty([_hint(s) for s in t.shape], dtype=t.dtype, device="meta")
        return e.requires_grad_(e.is_floating_point() or e.is_complex())

    try:
        with torch.inference_mode(False), torch.enable_grad(), _no_anomaly(), unset_fake_temporarily():
            call_args, call_kwargs = pytree.tree_map(example, (args, kwargs))
            out = op(*call_args, **call_kwargs)
    except Exception:
        return None
    node = out.grad_fn if isinstance(out, torch.Tensor) else None
    return None if node is None else re.sub(r"Backward\d*$", "", node.name())


def eager_saved_inputs(
    op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], requires_grad: tuple[bool, ...]
) -> frozenset[int] | None:
    """The tensor inputs (positions among the pytree leaves of ``(args, kwargs)``) that eager's own nodes save for
    ``op(*args, **kwargs)``, the k-th tensor leaf requiring grad as ``requires_grad[k]`` says: the call run on meta
    tensors, and the ``_saved_*`` values of the nodes it records read (a composite op records several). Exact where
    ``backward_reads`` is a superset: eager saves ``self`` for ``mul`` only where ``other`` requires grad, and a
    dropout's input not at all. None where the call fails on meta tensors. Cached per op, signature and flags."""
    return _cached(_SAVED_INPUTS, _saved_inputs, op, args, {**kwargs, _FLAGS: requires_grad})


_SAVED_INPUTS: dict[Any, frozenset[int] | None] = {}
_FLAGS = "__predispatch_views_requires_grad__"


def _saved_inputs(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> frozenset[int] | None:
    flags = kwargs.pop(_FLAGS)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    tensors = [k for k, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
    try:
        with torch.inference_mode(False), torch.enable_grad(), _no_anomaly(), unset_fake_temporarily():
            filled = [_hint(v) for v in leaves]
            for k, flag in zip(tensors, flags):
                e = torch.empty([_hint(s) for s in leaves[k].shape], dtype=leaves[k].dtype, device="meta")
                filled[k] = e.requires_grad_(flag and (e.is_floating_point() or e.is_complex()))
            call_args, call_kwargs = pytree.tree_unflatten(filled, spec)
            out = op(*call_args, **call_kwargs)
            storages = {filled[k].untyped_storage()._cdata: k for k in tensors}
            saved: set[int] = set()
            for node in _recorded_nodes(out, {id(filled[k]) for k in tensors}):
                for name in dir(node):
                    if name.startswith("_saved_"):
                        value = getattr(node, name)
                        for t in value if isinstance(value, (list, tuple)) else (value,):
                            if isinstance(t, torch.Tensor) and t.untyped_storage()._cdata in storages:
                                saved.add(storages[t.untyped_storage()._cdata])
    except Exception:
        return None
    return frozenset(saved)


def _recorded_nodes(out: Any, inputs: set[int]) -> list[Any]:
    """The autograd nodes between ``out`` and the leaves (the call's own record)."""
    stack = [t.grad_fn for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    found: dict[int, Any] = {}
    while stack:
        node = stack.pop()
        if node is None or id(node) in found or type(node).__name__ == "AccumulateGrad":
            continue
        found[id(node)] = node
        stack += [n for n, _ in node.next_functions]
    return list(found.values())


_RESULT = "result"
_SHAPE_ONLY = {
    torch.ops.aten.sym_size.int,
    torch.ops.aten.sym_stride.int,
    torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_storage_offset.default,
}
_CLONE = torch.ops.aten.clone.default


def _written_leaves(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> set[int]:
    """Leaf positions of the arguments ``op``'s schema writes (``self`` of ``mul_``, ``out`` of an out= call)."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return set()
    written_names = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    offset, found = 0, set()
    for k, value in enumerate(args):
        count = len(pytree.tree_leaves(value))
        if k < len(schema.arguments) and schema.arguments[k].name in written_names:
            found |= set(range(offset, offset + count))
        offset += count
    for name, value in kwargs.items():  # pytree's order
        count = len(pytree.tree_leaves(value))
        if name in written_names:
            found |= set(range(offset, offset + count))
        offset += count
    return found


def mark_must_recompute(nodes: Iterable[torch.fx.Node]) -> None:
    """Ask the partitioner to recompute ``nodes`` in the backward rather than save them (the tag activation
    checkpointing sets; AOTAutograd copies it from the graph it traces onto the joint graph's nodes), and to save
    rather than recompute each tensor computed from them: a recomputation that went on past ``nodes`` would save
    their inputs instead (Note [What a recomputation may save] in output_rules.py). Call it on a built graph."""
    from torch.utils.checkpoint import CheckpointPolicy

    tagged = set(nodes)
    for n in tagged:
        n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    for n in tagged:
        for user in n.users:
            value = user.meta.get("val", user.meta.get("example_value"))
            if user.op in ("call_function", "call_method") and user not in tagged and isinstance(value, torch.Tensor):
                user.meta.setdefault("recompute", CheckpointPolicy.MUST_SAVE)
