"""Stage 2b, continued: the fallback rules about graphs that end at a graph break (fallback_rules.py has the rest).
Dynamo hands the outputs of such a graph to a resume function it traced on their example values, and reads them
(``is_leaf``, ``grad_fn``, sizes) when it wraps them: an output the replay makes as eager does must survive that."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .fallbacks import Fallback, FallbackKind
from .graph_meta import GraphMeta, taken_at


def multi_output_view_at_graph_break(meta: GraphMeta, epilogue: set[fx.Node]) -> Fallback | None:
    """A replayed output of a multi-output view (or a view of one) that requires grad, in a graph ending at a graph
    break, whose base the code between the graphs can reach: an input, or another output that is no such view.
    Dynamo reads the view's ``grad_fn`` when it wraps it for the resume function, and if the break's own
    instruction wrote that base in place (``c.t_()`` on an input breaks the graph; fuzzer s41_47), eager's view
    refuses it: a crash inside the call where eager raises only if the caller reads ``grad_fn``, and stock, which
    returns no view, runs. A base only the multi-output views themselves reach stays replayed (``q, k =
    lin(x).chunk(2)`` before a ``print``): writing one of them in place with grad enabled is eager's own error.
    Not covered: the break's instruction writing one of them under no_grad (design/04, Known limits). Where Dynamo
    tells what that instruction writes and the base is not among it, nothing can write it in between (Note [What
    runs between two graphs] in _torch_internals/dynamo_break.py).
    """
    if not meta.graph_breaks.after or meta.graph_breaks.eager_views_cross:
        return None
    root = meta.root
    multi_output_views: set[fx.Node] = set()
    for n in meta.nodes:
        if graph_ops.is_view_getitem(n) or (graph_ops.is_view(n) and n.args[0] in multi_output_views):
            multi_output_views.add(n)
    reachable = {root[n] for n in meta.outputs if n not in multi_output_views} | set(meta.placeholders)
    for k, n in enumerate(meta.outputs):
        if not meta.graph_breaks.output_crosses(k):
            continue
        if (
            n in multi_output_views
            and n in epilogue
            and n in meta.requires_grad
            and root[n] in reachable
            and may_be_written_at_break(meta, n)
        ):
            return Fallback(
                FallbackKind.MULTI_OUTPUT_VIEW_AT_GRAPH_BREAK,
                f"output {k} ({n.name}) is a view from a multi-output view call, returned by a graph that stops "
                "at a graph break: Dynamo would crash wrapping it for the next graph if the code between the "
                f"graphs wrote its base {root[n].name} in place (eager refuses the grad_fn of such a view)",
            )
    return None


def dropout_layout_at_graph_break(meta: GraphMeta, epilogue: set[fx.Node]) -> Fallback | None:
    """A replayed dropout that returns its input in eager, whose fake allocates, reaching an output of a graph that
    ends at a graph break: Dynamo traced the code after the break on the fake's layout (Note [Dynamo's example
    values at a graph break])."""
    if not meta.graph_breaks.after:
        return None
    for k, n in enumerate(meta.outputs):
        if not meta.graph_breaks.output_crosses(k):
            continue
        m: Any = n
        while isinstance(m, fx.Node) and m in epilogue:
            if graph_ops.is_dropout(m) and graph_ops.returns_its_input(m) and _layout_differs_from_its_input(m):
                return Fallback(
                    FallbackKind.DROPOUT_LAYOUT_AT_GRAPH_BREAK,
                    f"output {k} ({n.name}) crosses a graph break and comes from {m.name} "
                    f"({graph_ops.op_name(m)}), which returns its input in eager where Dynamo's fake allocates: "
                    "the code Dynamo traced after the break assumed the fake's layout",
                )
            m = m.args[0] if m.args else None
    return None


def _layout_differs_from_its_input(n: fx.Node) -> bool:
    """The fake allocated a tensor whose sizes, strides or offset differ from the input eager returns: only then
    can code traced on the fake's layout meet another. A dense input at offset 0 has the fake's layout (a model's
    eval or p=0 dropout, deberta in the model suite); an expanded or offset view does not (fuzzer s905_79)."""
    value, source = n.meta.get("val"), n.args[0].meta.get("val") if isinstance(n.args[0], fx.Node) else None
    if not isinstance(value, torch.Tensor) or not isinstance(source, torch.Tensor):
        return False
    if ti.storage_id(value) == ti.storage_id(source):
        return False
    # As text: symbolic sizes compare by their expressions, without adding guards.
    layouts = [str((tuple(t.shape), tuple(t.stride()), t.storage_offset())) for t in (value, source)]
    return layouts[0] != layouts[1]


# Note [Dynamo's example values at a graph break]
# Dynamo traces the code after a graph break, and evaluates its size, stride and offset calls, on the example values
# of the graph's outputs. Where its fake of an op disagrees with eager's layout, eager's output, which the replay
# returns, reaches code built for another layout. The one such op is the dropout family (Note [Ops that return their
# input] in graph_ops.py): eager returns the input itself when p == 0 or not training, the fake kernel allocates.
# ``t = dropout(x.expand(...), 0.0).transpose(3, 1); t.as_strided(t.size(), t.stride(), t.storage_offset())`` then
# raises where stock, whose output has the fake's layout, runs (fuzzer s905_79; Dynamo with backend="eager" raises
# the same). Such a graph falls back, where the fake's layout differs from the input's (a dense input at offset 0
# has the same layout, and replays).


def may_be_written_at_break(meta: GraphMeta, view: fx.Node, by_the_break: bool = True) -> bool:
    """Whether the instruction Dynamo broke the graph at (unless ``by_the_break`` is False) may write the storage of
    ``view``'s root in place, or the graph writes it itself after ``view`` was taken (then eager's view may refuse
    Dynamo's read alone; a view taken after the write records the version it sees, and the replay keeps the order)."""
    # A write before the chain's first view is no write after it: that view records the version it sees.
    writes, root, since = meta.graph_breaks.break_writes, meta.root[view], taken_at(view, meta.order, with_base=False)
    if any(
        meta.order[m] > since and meta.root.get(w) is root for m in meta.mutations for w in graph_ops.written_args(m)
    ):
        return True
    if not by_the_break or writes is None:
        return by_the_break
    nodes = {meta.placeholders[i] if kind == "input" else meta.outputs[i] for kind, i in writes}
    return any(meta.root.get(n, n) is root for n in nodes)
