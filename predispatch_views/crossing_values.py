"""Stage 2c, a helper of segments.py: the values that cross a cut, which segment computes them and what their
examples must share.

Note [A detach crosses no cut]
A compiled segment is one autograd node (AOTAutograd's), and its backward unpacks every value its partitioner
saved, whichever of the segment's outputs the backward starts from. Eager's backward unpacks only the values of the
nodes it reaches. A value the segment computes with grad and that a later segment only detaches (``t7 =
t3.detach()`` of ``t3 = t0.tanh()``) would cross the cut requiring grad: the segment's backward then includes the
op that made it and saves what that op saves (``tanh`` saves its result). A write to the detached value (which
shares its version counter) then makes every backward through the segment raise eager's version error, where
eager's backward never reaches ``tanh`` (fuzzer s1817_601, ``compile_function``). The whole program, compiled
as one graph, returns the detached value and saves nothing of it.
So a ``detach`` of a value an earlier compiled segment computes moves into that segment, as the one graph would
have it: the segment returns the detached value (no grad, so nothing of its producer is saved for it), and the
value itself crosses only where something else reads it. The move is exact where nothing between the two writes
the value's storage: a detach shares its argument's storage and version counter and has no autograd history,
so taking it earlier reads the same elements at every later point; a metadata write in between (``t3.t_()``)
would change what it sees, and keeps it where it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .graph_meta import GraphBreaks, GraphMeta, is_any_view

Group = tuple[str, list[fx.Node], bool]  # a segment's name, its nodes in program order, whether it is compiled


def is_detach(n: fx.Node) -> bool:
    """An ATen ``detach`` or Dynamo's ``Tensor.detach`` / ``torch.detach``."""
    return graph_ops.schema_name(n) == "detach" or n.target in ("detach", torch.detach)


def hoist_detaches(meta: GraphMeta, groups: Sequence[Group]) -> list[Group]:
    """``groups`` with each detach of a value an earlier compiled group computes moved into that group (Note [A
    detach crosses no cut])."""
    order = meta.order
    group_of = {n: k for k, (_, members, _) in enumerate(groups) for n in members}
    moved: dict[fx.Node, int] = {}
    for k, (_, members, _) in enumerate(groups):
        for d in members:
            x = d.args[0] if d.args else None
            if not (is_detach(d) and isinstance(x, fx.Node) and group_of.get(x, k) < k and groups[group_of[x]][2]):
                continue
            root = meta.root.get(x, x)
            between = (n for n in meta.nodes if order[x] < order.get(n, -1) < order[d])
            if not any(meta.root.get(w, w) is root for n in between for w in graph_ops.written_args(n)):
                moved[d] = group_of[x]
    if not moved:
        return list(groups)
    return [
        (name, sorted((n for n in group_of if moved.get(n, group_of[n]) == k), key=order.__getitem__), compiled)
        for k, (name, _, compiled) in enumerate(groups)
    ]


def sources_sharing_storage(meta: GraphMeta, stages: Sequence[Any], sources: Sequence[tuple[str, Any]]) -> set[int]:
    """The positions of a segment's sources (segments.Source: a program input, or an earlier stage's result) whose
    traced value shares its storage with another source's. Their examples must share it too: a segment compiled
    for unaliased inputs reorders a write through one before a read of the other (fuzzer s1819_357:
    ``a[1:2]``, handed over by the first segment, and ``ReturnsInput.apply(a)``, written and then read by a
    ``ScaledClone`` in two independent core parts)."""
    by_storage: dict[Any, list[int]] = {}
    for k, (kind, index) in enumerate(sources):
        if kind == "constant":
            continue
        node = meta.placeholders[index] if kind == "arg" else next(s for s in stages if s.name == kind).nodes[index]
        if isinstance(value := node.meta.get("val"), torch.Tensor):
            by_storage.setdefault(ti.StorageWeakRef(value.untyped_storage()), []).append(k)
    return {k for group in by_storage.values() if len(group) > 1 for k in group}


def views_a_dropout_returning_its_input(n: fx.Node) -> bool:
    """``n`` is (a view of) a dropout that returns its input in eager (p=0, or eval) but a fresh tensor where torch
    2.13 compiles it (Note [An eval dropout of an input the core reads]). A call run in eager on it (a Function
    returning or marking dirty its input) would alias that fresh tensor, where eager's aliases the input."""
    while is_any_view(n) and not graph_ops.is_dropout(n) and n.args and isinstance(n.args[0], fx.Node):
        n = n.args[0]
    return graph_ops.is_dropout(n) and graph_ops.returns_its_input(n) and not ti.eval_dropout_is_traced_as_its_input()


def graph_breaks_of_stage(meta: GraphMeta, plan: Any, stage: Any) -> GraphBreaks:  # segments.Cut, Stage
    """Where a segment meets a graph break: its outputs that are the program's cross the one after the program,
    its inputs that are the program's come from the one before it. The program may itself be a segment (a cut
    inside a cut): only its own outputs and inputs that cross a break do (fuzzer s1830_806, where an input the
    outer cut handed over, eager's own value, was taken for stock's view from before the break)."""
    breaks, writes = meta.graph_breaks, meta.graph_breaks.break_writes
    returned = {j for k, (kind, j) in enumerate(plan.outputs) if kind == stage.name and breaks.output_crosses(k)}
    from_program = {j for j, (kind, i) in enumerate(stage.sources) if kind == "arg" and breaks.input_crosses(i)}
    if writes is not None:  # what the break's instruction writes, as the segment's inputs and outputs of its storage
        nodes_of = {s.name: s.nodes for s in plan.stages}
        written = (meta.placeholders[i] if k == "input" else meta.outputs[i] for k, i in writes)
        at = {meta.root.get(n, n) for n in written}
        ins = [meta.placeholders[i] if kind == "arg" else nodes_of[kind][i] for kind, i in stage.sources]
        writes = frozenset(
            [("input", k) for k, n in enumerate(ins) if meta.root.get(n, n) in at]
            + [("output", j) for j, n in enumerate(stage.nodes) if meta.root.get(n, n) in at]
        )
    checked = frozenset(j for j, (kind, i) in enumerate(stage.sources) if kind == "arg" and i in breaks.checked_inputs)
    return GraphBreaks(
        breaks.before, breaks.after, frozenset(from_program), frozenset(returned), checked, writes,
        breaks.eager_views_cross,
    )  # fmt: skip
