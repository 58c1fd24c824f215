"""Stage 3b, one small graph transform on the core: what its backward saves of a tensor the caller can write. An
output whose alias the core saves gets a version counter of its own; the runtime watches that output, and each
input whose view the core saves, for eager's version error (version_watches.py).

Note [A saved alias of a value the caller can write]
``t0 = a.sum(2); t1 = t0.transpose(1, 0); t2 = t1.sin(); return t1, t2.detach() * 3``: the epilogue replays
``t1`` from the core's output ``sum_1``, and the core's compiled backward saves ``transpose`` for ``sin``. That
saved ``transpose`` is a view of the core's output, so it shares the version counter of every view the epilogue
takes of that output. A caller who writes ``t1`` in place and then backwards through ``t1`` alone met "one of the
variables needed for gradient computation has been modified by an inplace operation" from the compiled backward:
it unpacks every saved tensor whenever any output of the core gets a gradient. Eager's backward never reaches
``SinBackward0`` there and runs; stock runs too (it returns ``t1`` through ``_unsafe_view``, with a version
counter of its own: AOTAutograd's Note [Intermediate Bases Optimization]). Fuzzer s1808_2663.

The core returns such an output as ``alias(value)``: AOTAutograd sees an output aliasing an intermediate no other
output aliases and returns it through ``_unsafe_view`` as it does stock's (the same storage, a version counter of
its own, no view relation for autograd), whatever the inner backend (inductor returned the saved buffer itself for
an ``_unsafe_view`` written into the graph). AOTAutograd does that only for an output that requires grad; one that
requires none (``t2 = t0.detach().sigmoid()`` saved by ``t2 * t0``) it returns as the graph's ``alias``, a view
where eager's is none (fuzzer s1812_1567), so such an output is returned as ``clone(value)``: a fresh tensor, as
eager's is, that no other output shares. The compiled backward's saved alias then never sees the caller's writes.
Eager's error where eager's backward does reach the saver is kept by a watch (Note [Eager's version error] in
version_watches.py): a pre-hook on the core's node raises it when a gradient arrives at an output computed from the
saver and the returned value's version has moved since the core returned it. Which values a saver saves is asked of
eager itself (``graph_ops``'s ``eager_saved_args``: the call run on meta tensors, its nodes' ``_saved_*`` read),
with the program's own requires-grad flags: the superset ``saved_by_backward`` gives made a watch raise where
eager's dropout saves nothing (fuzzer s1809_447). Only for a call autograd records (a call under no_grad saves
nothing), only where the core may be differentiated (the slicer is given which inputs require grad), only for an
output that no other core output aliases (each would get a counter of its own where eager's share one) and that no
input aliases (by storage or by the graph: a p=0 dropout returns its input), and not for an in-place op, whose
backward reads its input's old value from a copy autograd saves (fuzzer s1502_2277).

Note [A saved view of an input the epilogue views]
``t1 = a.view(1, 4).split(2, 1)[1]; return t1, t1.sin()``: eager's ``sin`` saves ``t1``, a view of the input
``a``, so a later write to ``a`` (the next graph's ``torch.add(a, a, out=a)`` under no_grad, or the caller's)
makes eager's backward raise where it reaches ``sin``'s node. Stock's graph returns ``t1``, and the partitioner
saves that output (a view sharing ``a``'s version counter), so stock's backward raises too. The core does not
return ``t1`` (the epilogue replays it), and the min-cut partitioner saved ``cos(t1)`` instead: nothing the
compiled backward saved shares ``a``'s version counter, so its backward ran silently on the old value, and the
caller's second backward then met eager's freed nodes behind it (fuzzer s1808_751). So where a core op autograd
records saves (as eager's nodes save it) a view of an input the epilogue also reads, the runtime watches the
input: the pre-hook raises the version error when a gradient reaches the node at an output computed from the op
and the input's version has moved since the core returned. The hook holds a detached alias of the input, as
eager's node holds the view: no more memory than eager keeps. A saved input itself, or a view of an input nothing
replays, is left alone: stock's graph is the core there, and its partitioner chooses as the core's. Under compiled
autograd no hook raises, so such a graph falls back to stock (version_watches.fallback_under_compiled_autograd).
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .graph_meta import alias_roots, grad_flow


@dataclass(frozen=True)
class VersionWatch:
    """What the runtime watches (version_watches.py): a value whose version a pre-hook checks where eager's backward
    would check a value it saved."""

    source: Literal["output", "input"]  # a core output (held weakly) or a graph input (held as a detached alias)
    index: int
    readers: tuple[int, ...]  # the core outputs computed from the node that saved it (or an alias of it)
    name: str | None = None  # eager's node that made the saved value, where eager's message names it
    shape: tuple[int, ...] | None = None  # the saved value's shape, where it is an alias of the watched tensor
    # An output held as a detached alias too: the compiled backward recomputes it (Note [Segments]) where eager
    # saved it, so it may die, written in place first, long before eager's saved value would.
    held_strongly: bool = False


def separate_saved_aliases(
    graph: fx.Graph, returned: list[fx.Node], input_requires_grad: Sequence[bool], read_inputs: Container[fx.Node]
) -> tuple[list[fx.Node], tuple[VersionWatch, ...]]:
    """``returned`` (the core's outputs, in ``graph``, which has no output node yet), each output whose alias the
    core saves replaced by its ``alias``, and the watches for the runtime; ``read_inputs``: the placeholders the
    epilogue reads. See the Notes; the graph runs in the current grad mode."""
    nodes = list(graph.nodes)
    storage = {n: ti.storage_ref(graph_ops.example_value(n)) for n in nodes}
    placeholders = {p: i for i, p in enumerate(graph.find_nodes(op="placeholder"))}
    inputs = {storage[p] for p in placeholders} - {None}
    # An input's alias by the graph's structure too: a dropout with p=0 returns its input, where its fake value
    # does not share the input's storage (Note [Ops that return their input] in graph_ops.py).
    roots = alias_roots(nodes, None)
    of_inputs = {n for n in nodes if storage[n] in inputs or roots[n].op == "placeholder"}
    recorded, requires_grad = grad_flow(nodes, torch.is_grad_enabled(), input_requires_grad)
    positions: dict[object, list[int]] = {}
    for k, r in enumerate(returned):
        if storage[r] is not None and r not in of_inputs:
            positions.setdefault(storage[r], []).append(k)
    outputs: dict[object, list[tuple[fx.Node, fx.Node]]] = {}  # storage -> (saver, the alias it saves)
    viewed: dict[int, list[tuple[fx.Node, fx.Node]]] = {}  # input -> (saver, the view of it it saves)
    for n in nodes:
        if n not in recorded or graph_ops.mutated_input(n) is not None:
            continue  # an in-place op's backward reads its input's old value: autograd saves a copy (original_self)
        for a in eager_saved_args(n, requires_grad) or ():
            if a not in of_inputs and len(positions.get(storage[a], ())) == 1:
                outputs.setdefault(storage[a], []).append((n, a))
            elif a.op != "placeholder" and (p := _viewed_input(a)) is not None and p in read_inputs:
                viewed.setdefault(placeholders[p], []).append((n, a))
    returned = list(returned)
    watches = [_watch("output", positions[ref][0], found, returned) for ref, found in outputs.items()]
    watches += [_watch("input", i, found, returned) for i, found in sorted(viewed.items())]
    for ref in outputs:
        (k,) = positions[ref]
        returned[k] = _separated(graph, returned[k], returned[k] in requires_grad)
    return returned, tuple(w for w in watches if w.readers)


def eager_saved_args(node: fx.Node, requires_grad: Container[fx.Node]) -> set[fx.Node] | None:
    """The arguments eager's own nodes save for this call, exactly (``graph_ops.saved_by_backward`` is a superset),
    where ``requires_grad`` holds the values that require grad; None where unknown."""
    if (op := graph_ops.callable_of(node)) is None:
        return None
    args, kwargs = fx.node.map_aggregate((node.args, node.kwargs), graph_ops.example_value)
    leaves, values = ti.tree_leaves((node.args, node.kwargs)), ti.tree_leaves((args, kwargs))
    if len(leaves) != len(values):
        return None
    flags = tuple(leaf in requires_grad for leaf, v in zip(leaves, values) if isinstance(v, torch.Tensor))
    saved = ti.eager_saved_inputs(op, args, kwargs, flags)
    return None if saved is None else {leaves[k] for k in saved if isinstance(leaves[k], fx.Node)}


def _watch(
    source: Literal["output", "input"], index: int, found: list[tuple[fx.Node, fx.Node]], returned: list[fx.Node]
) -> VersionWatch:
    below = set().union(*({s} | graph_ops.descendants(s) for s, _ in found))
    readers = tensor_readers(returned, below)
    if source == "output" and all(a is returned[index] for _, a in found):  # the output itself: eager names its node
        return VersionWatch(source, index, readers)
    shape = getattr(graph_ops.example_value(found[0][1]), "shape", ())
    return VersionWatch(source, index, readers, shape=tuple(int(s) if isinstance(s, int) else -1 for s in shape))


def result_watch_name(n: fx.Node) -> str | None:
    """Eager's node for a call whose backward reads its own result (``TanhBackward0``), as the runtime's watch of
    that result names it (Note [Eager's version error] in version_watches.py); None for any other call."""
    reads = graph_ops.saved_by_backward(n) if not graph_ops.is_opaque_call(n) else None
    if reads is None or not reads[1] or not isinstance(graph_ops.example_value(n), torch.Tensor):
        return None
    target = getattr(torch.Tensor, str(n.target), None) if n.op == "call_method" else n.target
    args, kwargs = fx.node.map_aggregate((n.args, n.kwargs), graph_ops.example_value)
    return ti.eager_node_name(target, args, kwargs) if callable(target) else None


def tensor_readers(returned: Sequence[Any], below: Container[Any]) -> tuple[int, ...]:
    """The positions of the core outputs in ``below`` that are tensors: a symbolic size computed from a saver is no
    reader of a watched value (s1812_596)."""
    return tuple(
        j for j, m in enumerate(returned) if m in below and isinstance(graph_ops.example_value(m), torch.Tensor)
    )


def _viewed_input(v: fx.Node) -> fx.Node | None:
    """The placeholder ``v`` is a view (of a view...) of, through no ``detach``; None if ``v`` is none."""
    value = graph_ops.example_value(v)
    if not isinstance(value, torch.Tensor):
        return None
    storage, n = ti.storage_id(value), v
    while n.op != "placeholder":
        if n.op not in ("call_function", "call_method") or not n.args or not isinstance(n.args[0], fx.Node):
            return None
        if graph_ops.schema_name(n) == "detach" or n.target in ("detach", torch.detach):
            return None
        n = n.args[0]
        value = graph_ops.example_value(n)
        if isinstance(value, torch.Tensor) and ti.storage_id(value) != storage:
            return None
    return n


def _separated(graph: fx.Graph, value: fx.Node, requires_grad: bool) -> fx.Node:
    """``alias(value)`` (``clone`` where it requires no grad), appended to ``graph``."""
    op = torch.ops.aten.alias.default if requires_grad else torch.ops.aten.clone.default
    node = graph.call_function(op, (value,))
    node.meta = {**value.meta, _SEPARATED: True}
    return node


_SEPARATED = "predispatch_views_separated_version"


def separated_value(n: Any) -> Any:
    """The value an output returned through its separating ``alias`` stands for; ``n`` otherwise."""
    return n.args[0] if isinstance(n, fx.Node) and n.meta.get(_SEPARATED) else n
