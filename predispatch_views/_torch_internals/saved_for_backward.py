"""What an op's backward reads, asked of torch itself: the op and its backward traced once, as AOTAutograd traces
a joint graph, instead of a hand-written table of derivative formulas.

Note [Which ops save their result]
Eager saves an op's output for backward where its derivative formula reads ``result`` (derivatives.yaml:
``tanh``, ``exp``, ``sigmoid``, ``tan``, ``amax``, ``std``...). A compiled region saves it there too, and a later
in-place write to it then makes the backward raise. ``backward_reads_result`` traces ``op`` on fake inputs of the
call's shapes and dtypes, every floating input requiring grad (a superset of what any call asks: more inputs
requiring grad only adds reads), then ``autograd.grad`` of its outputs, with ``make_fx``; the result is read where
a node of the backward consumes an output of the forward (through ``detach``, ``alias`` or ``getitem``: autograd
unpacks a saved output as a detached alias). Any failure to trace answers True, the conservative answer. The
answers are cached per op and input signature.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

_ALIASES = {operator.getitem, torch.ops.aten.detach.default, torch.ops.aten.alias.default}


def _hint(x: Any) -> Any:
    """A concrete value for a size (a SymInt's hint); anything else as it is."""
    if isinstance(x, torch.SymInt):
        return x.node.hint if x.node.hint is not None else 2
    return x


def _signature(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(_hint(s) for s in value.shape), value.dtype, str(value.device))
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v) for v in value)
    return ("value", repr(_hint(value)))


def backward_reads_result(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``op(*args, **kwargs)``'s backward reads its output (Note [Which ops save their result]). ``args``
    hold example values (fake tensors, SymInts) where the graph had nodes."""
    try:
        key = (op, _signature(args), _signature(tuple(sorted(kwargs.items()))))
        hash(key)
    except TypeError:
        return True
    if key not in _ANSWERS:
        _ANSWERS[key] = _reads_result(op, args, kwargs)
    return _ANSWERS[key]


_ANSWERS: dict[Any, bool] = {}


def _reads_result(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    leaves, spec = pytree.tree_flatten((args, kwargs))
    positions = [k for k, v in enumerate(leaves) if isinstance(v, torch.Tensor)]

    def example(t: torch.Tensor) -> torch.Tensor:
        e = torch.empty([_hint(s) for s in t.shape], dtype=t.dtype, device="meta")
        return e.requires_grad_(e.is_floating_point() or e.is_complex())

    def joint(*tensors: torch.Tensor) -> Any:
        filled = list(leaves)
        for k, t in zip(positions, tensors):
            filled[k] = t
        call_args, call_kwargs = pytree.tree_unflatten(filled, spec)
        out = op(*call_args, **call_kwargs)
        outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
        wanted = [t for t in tensors if t.requires_grad]
        if not outs or not wanted:
            return (out,)
        ones = [torch.ones(o.shape, dtype=o.dtype, device=o.device) for o in outs]
        return (out, torch.autograd.grad(outs, wanted, ones, allow_unused=True))

    try:
        with torch.enable_grad():
            gm = make_fx(joint, tracing_mode="fake")(*[example(leaves[k]) for k in positions])
    except Exception:
        return True
    output = gm.graph.output_node()
    result = {n for n in pytree.tree_leaves(output.args[0][0]) if isinstance(n, torch.fx.Node)}
    for n in gm.graph.nodes:  # in order: an alias of an output is seen before what reads it
        if n.op != "call_function" or n in result or not any(i in result for i in n.all_input_nodes):
            continue
        if n.target in _ALIASES:
            result.add(n)
        elif n.target is not torch.ops.aten.ones.default:
            return True
    return False
