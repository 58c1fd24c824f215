"""Stage 2c, a helper of segments.py: which segment computes a value the program only detaches later.

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

import torch
from torch import fx

from . import graph_ops
from .graph_meta import GraphMeta

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
