"""What the instruction Dynamo broke a graph at may write (private Dynamo APIs, behind _torch_internals like every
other): Note [What runs between two graphs].

Note [What runs between two graphs]
At a graph break in the frame Dynamo compiles (not inside a function it inlined), Dynamo compiles the graph so far,
runs the one instruction it could not trace in eager, and calls a resume function for the rest, whose trace wraps
the graph's outputs again (reading ``grad_fn`` and ``is_leaf``). Eager's view of a base written in place in between
refuses that read; so the instruction decides whether a replayed view crossing the break is safe. While the backend
compiles the graph, Dynamo's translator still holds that instruction and, on its stack, what it takes: a jump on a
tensor's truth value writes nothing, nor does ``print`` of tensors and constants, ``torch._dynamo.graph_break()`` or
a tensor method that is an aten op with no mutable overload, and a torch function called with ``out=`` (Dynamo
breaks at an ``out=`` it cannot trace) writes only its out tensors; an in-place view op on a frame's input
(``b.unsqueeze_(0)``: Dynamo breaks at it) bumps only the version its receiver's storage shares. Anything else may
write whatever it reaches: unknown. A write the graph itself makes counts only after the view was taken
(graph_meta.may_be_written_at_break).
"""

from __future__ import annotations

import sys
from typing import Any

import torch

Written = frozenset[tuple[str, int]]  # ("input", i) or ("output", k) of the graph being compiled


def graph_break_writes(gm: Any) -> Written | None:
    """The inputs and outputs of ``gm`` (compiled at a graph break) that the instruction run in eager before the
    resume function may write in place, or None where that cannot be told."""
    try:
        return _writes(gm)
    except Exception:  # any surprise in Dynamo's state: unknown, the conservative answer
        return None


def _writes(gm: Any) -> Written | None:
    from torch._dynamo.symbolic_convert import InstructionTranslator
    from torch._dynamo.variables import BuiltinVariable, ConstantVariable, SkipFunctionVariable, TensorVariable
    from torch._dynamo.variables.misc import DelayGraphBreakVariable, GetAttrVariable, NullVariable
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

    reason = getattr(gm, "compile_subgraph_reason", None)
    if reason is None or not reason.graph_break or len(reason.user_stack or ()) != 1:
        return None  # a break inside an inlined function: the rest of that function runs in eager too
    tx = InstructionTranslator.current_tx()
    if tx is None or tx.output.graph is not gm.graph:
        return None
    inst, stack = tx.current_instruction, [_unwrapped(v) for v in tx.stack]
    if inst.opname.startswith(("POP_JUMP", "JUMP_IF")):
        return frozenset() if stack and type(stack[-1]) is TensorVariable else None
    if inst.opname != "CALL" or sys.version_info[:2] not in ((3, 11), (3, 12)) or inst.arg is None:
        return None
    n = inst.arg
    if len(stack) < n + 2 or not isinstance(stack[-n - 2], NullVariable):
        return None  # a method call (no NULL below the callable): the method may write its object
    fn, args = stack[-n - 1], stack[len(stack) - n :]
    if isinstance(fn, DelayGraphBreakVariable):
        return _inplace_view_of_an_input(gm, tx, fn)
    if isinstance(fn, GetAttrVariable) and type(_unwrapped(fn.obj)) is TensorVariable and _reads_only(fn.name):
        return frozenset()  # ``t2.storage_offset()``, ``t.as_strided(...)`` on a plain tensor (fuzzer s1822_144)
    names = tx.kw_names.as_python_constant() if tx.kw_names is not None else ()
    kwargs = dict(zip(names, args[n - len(names) :]))
    if isinstance(fn, SkipFunctionVariable) and fn.value is torch._dynamo.graph_break:
        return frozenset()
    if isinstance(fn, BuiltinVariable) and fn.fn is print:
        plain = all(type(a) in (TensorVariable, ConstantVariable) for a in args)
        return frozenset() if plain else None
    if not isinstance(fn, TorchInGraphFunctionVariable) or "out" not in kwargs:
        return None
    if getattr(fn.value, "__name__", "_").endswith("_") or any(
        isinstance(a, TensorVariable) and type(a) is not TensorVariable for a in args
    ):
        return None  # an in-place torch function, or a tensor subclass's __torch_function__
    out = kwargs["out"]
    outs = list(getattr(out, "items", [out]))
    return _positions(gm, outs)


def _inplace_view_of_an_input(gm: Any, tx: Any, fn: Any) -> Written | None:
    """Dynamo breaks at an in-place view op (``unsqueeze_``, ``transpose_``, ``resize_``: aten's ``inplace_view``
    tag, but not ``set_``, which changes what its receiver aliases) called on a frame's input. Such an op changes
    its receiver's metadata and bumps the version its aliases share, and writes nothing else: the graph's inputs
    sharing the receiver's storage (none where the graph does not read it)."""
    from torch._dynamo.source import AttrSource

    source = fn.source
    if not isinstance(source, AttrSource) or source.member == "set_" or not _is_inplace_view(source.member):
        return None
    receiver = eval(source.base.name, {"L": tx.f_locals, "G": tx.f_globals})  # how Dynamo's guards read it
    if not isinstance(receiver, torch.Tensor) or type(receiver) is not torch.Tensor:
        return None
    storage = receiver.untyped_storage()._cdata
    found = set()
    for i, p in enumerate(gm.graph.find_nodes(op="placeholder")):
        example = getattr(p.meta.get("grapharg"), "example", None)
        if not isinstance(example, torch.Tensor):
            continue  # a symbol or a constant: no storage
        if type(example) is not torch.Tensor:
            return None  # a subclass: its storage may not be the one it reads
        if example.untyped_storage()._cdata == storage:
            found.add(("input", i))
    return frozenset(found)


def _reads_only(method: str) -> bool:
    """A tensor method that is an aten op with no mutable overload, other than ``backward`` (which runs hooks and
    accumulates gradients): it writes no tensor."""
    overloads = _aten_overloads(method)
    mutable = any(o._schema.is_mutable for o in overloads)
    return bool(overloads) and not mutable and method != "backward" and not method.endswith("_")


def _is_inplace_view(name: str) -> bool:
    overloads = _aten_overloads(name)
    return bool(overloads) and all(torch.Tag.inplace_view in o.tags for o in overloads)


def _aten_overloads(name: str) -> list[Any]:
    packet = getattr(torch.ops.aten, name, None)
    names = packet.overloads() if packet is not None and hasattr(packet, "overloads") else []
    return [getattr(packet, o) for o in names]


def _unwrapped(v: Any) -> Any:
    """A realized lazy variable's tracker; an unrealized one stays as it is (no guard is installed)."""
    from torch._dynamo.variables.lazy import LazyVariableTracker

    return v.unwrap() if isinstance(v, LazyVariableTracker) and v.is_realized() else v


def _positions(gm: Any, written: list[Any]) -> Written | None:
    from torch._dynamo.variables import TensorVariable

    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    # Output positions count node outputs only, as GraphMeta.outputs does (Dynamo's graphs return nodes only).
    outputs = [
        o for o in torch.utils._pytree.tree_leaves(gm.graph.output_node().args[0]) if isinstance(o, torch.fx.Node)
    ]
    found: set[tuple[str, int]] = set()
    for w in written:
        if type(w) is not TensorVariable:
            return None
        node = w.as_proxy().node
        where = [("input", i) for i, p in enumerate(placeholders) if p is node]
        where += [("output", k) for k, o in enumerate(outputs) if o is node]
        if not where:
            return None
        found.update(where)
    return frozenset(found)


def compiled_code_name(gm: Any) -> str | None:
    """The name of the code object whose frame Dynamo is compiling ``gm`` from (a resume function's own name), or
    None outside Dynamo's compile of it. The graph's ``compile_subgraph_reason`` names the user's function instead
    where a resume function's graph ends at another break (fuzzer s1820_651)."""
    from torch._dynamo.symbolic_convert import InstructionTranslator

    tx = InstructionTranslator.current_tx()
    return tx.f_code.co_name if tx is not None and tx.output.graph is gm.graph else None
