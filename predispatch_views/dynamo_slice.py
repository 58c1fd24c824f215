"""Stages 2-3 on Dynamo's own graph: split a graph without mutations into a core and its trailing view calls,
with no pre-dispatch trace.

Note [Slicing Dynamo's graph]
The pre-dispatch capture (capture.py) exists for what Dynamo's torch-level graph does not show: which calls write
which tensors, in what grad mode, through which aliases. A graph with none of that (no in-place call, no ``out=``,
no grad-mode or autocast change, no higher-order op, no custom Function, no dropout that may return its input) needs
none of the rules the capture feeds (analysis.py, fallback_rules.py: every one of them is about a mutation, a
grad-mode region, a custom Function or a graph break). For such a graph the epilogue is what Note [Which nodes the
epilogue replays] rule 1 picks, read off Dynamo's nodes: the view calls (``chunk``, ``unbind``, ``split``, ``view``,
basic indexing...) whose results reach an output through view calls only. Replaying the user's own torch-level call
in eager (``torch.Tensor.chunk(base, 2)``) runs the very kernel eager ran, so the outputs are eager's views, as when
the pre-dispatch call is replayed. The core is Dynamo's graph without those calls; the inner backend compiles it as
stock compiles Dynamo's graph, so the program pays for no trace beyond stock's (issue 23, "one trace"). A 3-d
``F.linear`` with a bias whose result is only returned or viewed is split into its ``addmm`` (core) and its ``view``
(epilogue): Note [The view inside a linear].

The slice is taken only where it is provably the one the capture would give; otherwise the pipeline captures as
before. So it declines (returns a reason, logged at DEBUG) when:
- any node mutates, changes a mode, or is not a plain call (the list above; a call whose name ends in ``_``);
- a core value the epilogue or the output reads is not a tensor, shares storage with an input or with another
  such value, or is a view (a view call this slice does not replay, such as ``y[: x.size(0)]`` with a symbolic
  bound, which the capture replays as ``aten.slice``). The one view allowed is a linear's: ``F.linear`` of a 3-d
  input returns a view of its ``addmm``, and the capture keeps ``aten.linear`` whole too (pre-dispatch tracing
  runs above the composite kernels), so its core returns the same view;
- a view call's other arguments are computed in the graph from more than the inputs' sizes (a size computed from
  the inputs, ``x.size(0) * 2`` under dynamic shapes, is recomputed in the epilogue, as the capture's rule 1 does;
  a view the core reads too is copied into both, as the capture duplicates it);
- the graph starts or ends at a graph break (the graph-break rules of graph_break_rules.py);
- a backward can follow and the core falls into independent parts (Note [Independent parts of the core] in
  slicing.py: the capture's core would be cut into one compiled function per part).
``PREDISPATCH_VIEWS_SLICE_DYNAMO=0`` turns the slice off, for comparing it with the capture.
"""

from __future__ import annotations

import inspect
import operator
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from . import output_rules
from .functionalize import EPILOGUE_TAG
from .slicing import SlicedProgram, slice_graph

ENABLED = os.environ.get("PREDISPATCH_VIEWS_SLICE_DYNAMO", "1") != "0"

MULTI_OUTPUT_VIEWS = frozenset(
    {"unbind", "split", "chunk", "tensor_split", "split_with_sizes", "hsplit", "vsplit", "dsplit"}
)
# Torch-level calls that return a view of their first argument, or may (reshape, flatten, contiguous): replayed in
# eager, each is the user's own call, so it does in eager exactly what it did there.
VIEWS = MULTI_OUTPUT_VIEWS | {
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "transpose", "swapaxes", "swapdims", "t",
    "permute", "movedim", "moveaxis", "narrow", "select", "squeeze", "unsqueeze", "expand", "expand_as", "diagonal",
    "unfold", "contiguous", "real", "imag", "view_as_real", "view_as_complex",
}  # fmt: skip
_IN_PLACE_OPERATORS = {
    operator.setitem, operator.delitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
    operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor,
    operator.ilshift, operator.irshift,
}  # fmt: skip
_SIDE_EFFECT_METHODS = {"retain_grad", "register_hook", "backward", "record_stream"}


def slice_dynamo_graph(
    gm: fx.GraphModule, example_inputs: Sequence[Any], *, differentiable: bool, at_graph_break: bool
) -> SlicedProgram | str:
    """The core/epilogue split of Dynamo's graph, or why it must be captured instead (Note [Slicing Dynamo's
    graph]). ``differentiable``: a backward can follow (grad mode on and some input requires grad)."""
    if at_graph_break:
        return "the graph starts or ends at a graph break"
    nodes = list(gm.graph.nodes)
    for n in nodes:
        if (why := _not_plain(gm, n)) is not None:
            return f"{n.name}: {why}"
    output = gm.graph.output_node()
    epilogue = _trailing_views(nodes, output)
    duplicated = _read_by_the_core(epilogue, output)  # the core computes its own copy, as the capture's does
    linear_views = {
        n
        for n in nodes
        if _linear_view(n) and all((u in epilogue and u not in duplicated) or u is output for u in n.users)
    }
    if not epilogue and not linear_views:
        return "no view call reaches an output"
    sizes: set[fx.Node] = set()  # recomputed in the epilogue from the inputs (dynamic shapes)
    for n in epilogue:
        others = [*n.args[1:], *n.kwargs.values()]
        if any(
            i.op != "placeholder" and i not in epilogue and not _size_from_inputs(i, sizes) for i in _nodes_in(others)
        ):
            return f"{n.name}: a view argument is computed in the graph from more than the inputs' sizes"
    crossing = [
        n
        for n in nodes
        if n not in epilogue
        and n is not output
        and any(u is output or (u in epilogue and n not in sizes) for u in n.users)
    ]
    if (why := _aliasing(nodes, crossing)) is not None:
        return why
    if differentiable and (why := _independent_parts(nodes, epilogue - duplicated, sizes, crossing)) is not None:
        return why
    recompute = output_rules.dynamo_bases_to_recompute(nodes, epilogue, crossing)
    executable = ti.lazy_graph_module(gm, _tagged(gm.graph, epilogue, linear_views, sizes | duplicated, recompute))
    requires_grad = [getattr(t, "requires_grad", False) for t in example_inputs] if differentiable else None
    return slice_graph(executable, None, requires_grad)


def _not_plain(gm: fx.GraphModule, n: fx.Node) -> str | None:
    if n.op in ("placeholder", "output"):
        return None
    if n.op == "get_attr":
        return "a submodule" if isinstance(_attr(gm, str(n.target)), torch.nn.Module) else None
    if n.op == "call_module":
        return "a module call"
    if any(k == "out" for k in n.kwargs):
        return "an out= call"
    name = _name(n)
    if "dropout" in name and ti.dropout_drops(n) is not True:
        return "a dropout that may return its input (eval or p=0: fake tensors do not show it)"
    if n.op == "call_method":
        if name.endswith("_") or name in _SIDE_EFFECT_METHODS:
            return f"the method {name}"
        return None
    target = n.target
    if target in _IN_PLACE_OPERATORS:
        return f"the in-place operator {name}"
    if isinstance(target, (ti.HigherOrderOperator, ti.OpOverloadPacket)):
        return f"the operator {name}"
    if isinstance(target, ti.OpOverload):
        return f"the mutable operator {name}" if ti.schema_of(target).is_mutable else None
    if name.startswith("_") or name.endswith("_"):  # _set_grad_enabled, _enter_autocast, relu_...
        return f"the call {name}"
    if _inplace_flag(n):
        return f"{name}(inplace=True)"
    return None


def _inplace_flag(n: fx.Node) -> bool:
    if n.kwargs.get("inplace") is True:
        return True
    try:
        bound = inspect.signature(n.target).bind(*n.args, **n.kwargs)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return bound.arguments.get("inplace") is True


def _trailing_views(nodes: list[fx.Node], output: fx.Node) -> set[fx.Node]:
    """Rule 1 of Note [Which nodes the epilogue replays], on torch-level nodes."""
    epilogue: set[fx.Node] = set()
    stack = list(output.all_input_nodes)
    while stack:
        n = stack.pop()
        if n in epilogue or not _is_view(n):
            continue
        epilogue.add(n)
        stack.append(n.args[0])  # type: ignore[arg-type]
    return epilogue


def _read_by_the_core(epilogue: set[fx.Node], output: fx.Node) -> set[fx.Node]:
    """Replayed views that compiled code reads too, with the views they are taken from: the core keeps its own copy
    of each (the capture's ``duplicated``, Note [Which nodes the epilogue replays]); the epilogue replays its own."""
    found: set[fx.Node] = set()
    stack = [n for n in epilogue if any(u not in epilogue and u is not output for u in n.users)]
    while stack:
        n = stack.pop()
        if n not in found:
            found.add(n)
            stack += [i for i in n.all_input_nodes if i in epilogue]
    return found


def _is_view(n: fx.Node) -> bool:
    if not n.args or not isinstance(n.args[0], fx.Node):
        return False
    if n.op == "call_function" and n.target is operator.getitem:
        base, index = n.args[0], n.args[1]
        if isinstance(_value(base), torch.Tensor):  # basic indexing of a tensor: a select or slice view
            return _basic_index(index)
        return isinstance(index, int) and _name(base) in MULTI_OUTPUT_VIEWS and _is_view(base)
    if not isinstance(_value(n.args[0]), torch.Tensor):
        return False
    name = _name(n)
    if name not in VIEWS:
        return False
    if n.op == "call_method":
        return True
    return n.op == "call_function" and n.target in (getattr(torch, name, None), getattr(torch.Tensor, name, None))


# Note [The view inside a linear]
# ``F.linear`` of a contiguous input of 3 or more dimensions with a bias returns a view: at::linear flattens the
# input, calls ``addmm`` and returns ``result.view(*leading, out)`` (eager's output has ``ViewBackward0`` over
# ``AddmmBackward0`` and a 2-d ``_base``). Compiled whole, it is a fresh tensor (stock's answer, and the capture's,
# which keeps ``aten.linear`` whole). Where such a linear's result is only returned or viewed further, the slice
# computes at::linear's own ``addmm`` in the core and replays the ``view`` in the epilogue, so the output is eager's
# view of a 2-d base. Which branch at::linear took is read off the example value (a view or not), for static
# sizes only; Dynamo's guards on the inputs' sizes and strides keep that branch for every call of the graph.
_LINEAR = (torch.nn.functional.linear,)


def _linear_view(n: fx.Node) -> bool:
    """A ``F.linear(x, w, b)`` whose result is at::linear's view of its ``addmm`` (Note [The view inside a linear])."""
    if n.op != "call_function" or n.target not in _LINEAR or n.kwargs or len(n.args) != 3:
        return False
    value, x = _value(n), _value(n.args[0])
    static = isinstance(value, torch.Tensor) and not any(isinstance(d, torch.SymInt) for d in value.shape)
    return static and isinstance(n.args[2], fx.Node) and isinstance(x, torch.Tensor) and ti.is_view(value)


_SIZE_METHODS = {"size", "stride", "dim", "numel", "storage_offset"}


def _size_from_inputs(n: fx.Node, sizes: set[fx.Node]) -> bool:
    """A size computed from the graph's inputs only (``x.size(0)``, ``s0 * 2``): the epilogue recomputes it from
    the real inputs, as the capture's rule 1 does (Note [Which nodes the epilogue replays]); added to ``sizes``."""
    if n in sizes:
        return True
    if isinstance(_value(n), torch.Tensor) or n.op not in ("call_method", "call_function"):
        return False
    if n.op == "call_method":
        known = n.target in _SIZE_METHODS
    else:
        sym_op = isinstance(n.target, ti.OpOverload) and ti.schema_of(n.target).name.startswith("aten::sym_")
        known = (
            sym_op
            or getattr(n.target, "__module__", None) in ("_operator", "operator")
            or n.target in (torch.sym_int, torch.sym_float, torch.sym_max, torch.sym_min, torch.sym_not)
        )
    if known and all(i.op == "placeholder" or _size_from_inputs(i, sizes) for i in n.all_input_nodes):
        sizes.add(n)
        return True
    return False


def _basic_index(index: Any) -> bool:
    """Ints, slices, None and Ellipsis: a view. A bound may be a node (a symbolic size); the slice then checks that
    it is a size computed from the inputs, which the epilogue recomputes."""
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, slice)) for i in items)


def _aliasing(nodes: list[fx.Node], crossing: list[fx.Node]) -> str | None:
    """Every core value the epilogue or the output reads is a tensor with a storage of its own, and not a view,
    except the result of a linear (Note [The view inside a linear]): any other view is a call the capture would
    replay (``x[: x.size(0)]`` under dynamic shapes is a ``slice`` to the capture, not a basic index here)."""
    storages = {ti.storage_ref(_value(p)) for p in _placeholders(nodes)} - {None}
    for n in crossing:
        if n.op == "placeholder":
            continue
        value = _value(n)
        if not isinstance(value, torch.Tensor):
            return f"{n.name}: a core output that is not a tensor"
        if ti.is_view(value) and not (n.op == "call_function" and n.target in _LINEAR):
            return f"{n.name}: a core output that is a view"
        storage = ti.storage_ref(value)
        if storage in storages:
            return f"{n.name}: a core output sharing storage with an input or another output"
        storages.add(storage)
    return None


def _independent_parts(
    nodes: list[fx.Node], epilogue: set[fx.Node], sizes: set[fx.Node], crossing: list[fx.Node]
) -> str | None:
    """Whether slicing.split_core would cut the capture's core: two or more connected parts with an output."""
    parent: dict[fx.Node, fx.Node] = {}

    def find(x: fx.Node) -> fx.Node:
        while x in parent:
            x = parent[x]
        return x

    # A size only the epilogue reads (through other sizes) is recomputed there: its core copy is dead code.
    replayed = epilogue | sizes
    computed = [
        n
        for n in nodes
        if n.op not in ("placeholder", "output")
        and n not in epilogue
        and not (n in sizes and all(u in replayed for u in n.users))
    ]
    for n in computed:
        for i in n.all_input_nodes:
            if i.op != "placeholder" and find(i) is not find(n):
                parent[find(i)] = find(n)
    components = {find(n) for n in computed}
    with_outputs = {find(n) for n in crossing if n.op != "placeholder"}
    if len(with_outputs) > 1 or components - with_outputs:
        return "the core has independent parts"
    return None


def _tagged(
    graph: fx.Graph, epilogue: set[fx.Node], linear_views: set[fx.Node], copied: set[fx.Node], recompute: set[fx.Node]
) -> fx.Graph:
    """A copy of Dynamo's graph with the epilogue tagged, its method calls as calls of ``torch.Tensor``'s methods
    (the runtime's generated code calls functions), each linear view split into its ``addmm`` and its ``view``
    (Note [The view inside a linear]), each size or view that both read copied into each, and the core's copies of
    ``recompute`` tagged for recomputation (Note [Bases the compiled backward must not save] in output_rules.py)."""
    copy = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    replayed: dict[fx.Node, fx.Node] = {}  # the epilogue's copy of a node in ``copied``

    def in_epilogue(a: fx.Node) -> fx.Node:
        return replayed.get(a, env[a])

    for n in graph.nodes:
        if n in copied:  # a size or a view the core reads too: a copy in each
            env[n] = copy.node_copy(n, env.__getitem__)
            replayed[n] = copy.node_copy(n, in_epilogue)
            _tag(replayed[n])
            continue
        if n in linear_views:
            x, w, b = (env[a] for a in n.args)  # type: ignore[index]
            flat = copy.call_function(torch.Tensor.reshape, (x, (-1, _value(n.args[0]).shape[-1])))
            base = copy.call_function(torch.addmm, (b, flat, copy.call_function(torch.Tensor.t, (w,))))
            env[n] = copy.call_function(torch.Tensor.view, (base, tuple(_value(n).shape)))
            env[n].meta[EPILOGUE_TAG] = True
            continue
        # The output reads the epilogue's copies: a view the core reads too is returned from the epilogue.
        new = copy.node_copy(n, in_epilogue if n in epilogue or n.op == "output" else env.__getitem__)
        if n in epilogue:
            _tag(new)
        env[n] = new
    ti.mark_must_recompute(env[n] for n in recompute if n in copied or n not in epilogue)  # the core's copies
    return copy


def _tag(n: fx.Node) -> None:
    n.meta = {**n.meta, EPILOGUE_TAG: True}
    if n.op == "call_method":
        n.op, n.target = "call_function", getattr(torch.Tensor, str(n.target))


def _nodes_in(args: Any) -> list[fx.Node]:
    found: list[fx.Node] = []
    fx.node.map_arg(args, found.append)
    return found


def _placeholders(nodes: list[fx.Node]) -> list[fx.Node]:
    return [n for n in nodes if n.op == "placeholder"]


def _value(n: Any) -> Any:
    return n.meta.get("example_value", n.meta.get("val")) if isinstance(n, fx.Node) else None


def _attr(gm: fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


def _name(n: fx.Node) -> str:
    return n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
