"""Stage 2 input: one typed record of what a pre-dispatch graph does, computed once per graph.

In the spirit of AOTAutograd's ``ViewAndMutationMeta``: the selection (analysis.py) and every fallback rule
(fallback_rules.py) read this record instead of each re-deriving alias roots, mutations, requires-grad and
grad-mode regions by its own walk over the graph.
"""

from __future__ import annotations

import collections
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops


@dataclass(frozen=True)
class GraphBreaks:
    """Where Dynamo split the user's function around a graph (neither, outside Dynamo)."""

    before: bool = False  # the graph is a resume function's: its inputs may be an earlier graph's outputs
    after: bool = False  # the graph ends at a graph break: a resume function gets its outputs
    # A segment (Note [Segments]): which of its inputs come from before a graph break (the rest come from the
    # segment before it) and which outputs cross one (the rest go to the next segment); None: all of them.
    inputs_before: frozenset[int] | None = None
    outputs_after: frozenset[int] | None = None
    # Inputs the runtime checks on each call not to share storage with a view stock returned (Note [Stock's views
    # across a graph break] in stock_views.py): a no_grad view of one of them may be replayed.
    checked_inputs: frozenset[int] = frozenset()
    # What the instruction Dynamo broke the graph at may write: ("input", i), ("output", k); None: anything
    # (Note [What runs between two graphs] in _torch_internals/dynamo_break.py).
    break_writes: frozenset[tuple[str, int]] | None = None
    # Stock's compile of the graph failed: it would run uncompiled, its outputs eager's views whatever the
    # prototype does (Note [Stock's views across a graph break] in stock_views.py).
    eager_views_cross: bool = False

    def input_crosses(self, i: int) -> bool:
        return self.before and (self.inputs_before is None or i in self.inputs_before)

    def output_crosses(self, k: int) -> bool:
        return self.after and (self.outputs_after is None or k in self.outputs_after)


NO_GRAPH_BREAKS = GraphBreaks()


def dynamo_graph_breaks(gm: fx.GraphModule) -> GraphBreaks:
    """Where Dynamo split the user's function around ``gm``, which it is compiling now."""
    after = ti.ends_at_graph_break(gm)
    return GraphBreaks(
        ti.starts_after_graph_break(gm), after, break_writes=ti.graph_break_writes(gm) if after else None
    )


@dataclass(frozen=True)
class GraphMeta:
    """What the graph does, as the selection and the fallback rules need it."""

    gm: fx.GraphModule
    nodes: list[fx.Node]
    order: dict[fx.Node, int]  # program order
    placeholders: list[fx.Node]
    outputs: list[fx.Node]  # the nodes the graph returns, in order (a node returned twice appears twice)
    # Each node -> the node whose storage it aliases (itself for a fresh value); inputs that share storage map to
    # the first of them (Note [Inputs that alias each other] in analysis.py).
    root: dict[fx.Node, fx.Node]
    mutations: list[fx.Node]  # in-place and out= calls, in program order (kinds: graph_ops.is_*_mutation)
    aliased_inputs: frozenset[fx.Node]  # inputs sharing their storage with another input
    # Inputs that are views autograd forbids rebasing and require grad (Note [A restricted view aliased by a write])
    restricted_inputs: frozenset[fx.Node]
    sym_from_inputs: frozenset[fx.Node]  # size arithmetic computable from the graph inputs alone
    requires_grad: frozenset[fx.Node]  # results that require grad in eager
    no_grad: frozenset[fx.Node]  # nodes run with grad mode off
    # Nodes autograd records (requiring grad, run with grad mode on): only these may save anything for backward.
    # A call under no_grad or inference_mode whose target requires grad is in ``requires_grad`` but not here.
    recorded: frozenset[fx.Node]
    grad_mode_changes: list[fx.Node]
    grad_enabled: bool  # the grad mode the graph is called in
    graph_breaks: GraphBreaks
    compiled_autograd: bool  # compiled autograd is configured on: the backward runs through it
    cut_around_saved_writes: bool = False  # Note [A write to a value a backward saved] in saved_value_rules.py
    later_segment: bool = False  # a segment after the first of a cut program (the same Note)

    @property
    def output(self) -> fx.Node:
        return self.nodes[-1]


def graph_meta(
    gm: fx.GraphModule,
    *,
    grad_enabled: bool,
    input_alias_groups: Sequence[int] | None = None,
    input_requires_grad: Sequence[bool] | None = None,
    input_restricted: Sequence[bool] = (),
    graph_breaks: GraphBreaks = NO_GRAPH_BREAKS,
    cut_around_saved_writes: bool = False,
    later_segment: bool = False,
) -> GraphMeta:
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    groups = collections.Counter(input_alias_groups or ())
    requires_grad = _requires_grad(nodes, placeholders, grad_enabled, input_requires_grad)
    no_grad = _under_no_grad(nodes, grad_enabled)
    return GraphMeta(
        gm=gm,
        nodes=nodes,
        order={n: i for i, n in enumerate(nodes)},
        placeholders=placeholders,
        outputs=output_nodes(nodes),
        root=alias_roots(nodes, input_alias_groups),
        mutations=[n for n in nodes if graph_ops.mutated_input(n) is not None],
        aliased_inputs=frozenset(
            placeholders[i] for i, first in enumerate(input_alias_groups or ()) if groups[first] > 1
        ),
        restricted_inputs=frozenset(p for p, restricted in zip(placeholders, input_restricted) if restricted),
        sym_from_inputs=_sym_from_inputs(nodes),
        requires_grad=requires_grad,
        no_grad=no_grad,
        recorded=requires_grad - no_grad,
        grad_mode_changes=[n for n in nodes if graph_ops.is_grad_mode_change(n)],
        grad_enabled=grad_enabled,
        graph_breaks=graph_breaks,
        compiled_autograd=ti.compiled_autograd_configured(),
        cut_around_saved_writes=cut_around_saved_writes,
        later_segment=later_segment,
    )


def restricted_view(meta: GraphMeta, n: fx.Node) -> bool:
    """A view autograd forbids rebasing: an output of a multi-output view call, or a view made under no_grad (or a
    view of one). Its ``grad_fn`` raises once its base is written; a plain view's is regenerated."""
    while is_any_view(n) and isinstance(n.args[0], fx.Node):
        if graph_ops.is_view_getitem(n) or n in meta.no_grad:
            return True
        n = n.args[0]
    return False


def through_a_copy(n: fx.Node) -> bool:
    """Whether the view chain ending at ``n`` holds an op that returns its input in eager (Note [Ops that return
    their input]) but a fresh tensor once compiled."""
    while is_any_view(n) and isinstance(n.args[0], fx.Node):
        if graph_ops.is_input_returned_by_a_fresh_op(n):  # not a declared view: those share storage by contract
            return True
        n = n.args[0]
    return False


def is_any_view(n: fx.Node) -> bool:
    """A view call, or a ``getitem`` of a multi-output view call."""
    return graph_ops.is_view(n) or graph_ops.is_view_getitem(n)


def hidden_from_autograd(meta: GraphMeta, write: fx.Node, target: fx.Node) -> bool:
    """Whether eager's ``write`` to ``target`` is hidden from autograd: made under no_grad, or through a detached
    alias (``t.detach().mul_(3)``)."""
    n = target
    while write not in meta.no_grad and is_any_view(n) and graph_ops.schema_name(n) != "detach":
        n = n.args[0]  # type: ignore[assignment]
    return write in meta.no_grad or graph_ops.schema_name(n) == "detach"


def only_hidden_writes(meta: GraphMeta, root: fx.Node, within: Sequence[fx.Node] | None = None) -> bool:
    """Whether the program writes data of ``root``'s storage, and only hidden from autograd. A segment handed a
    value of it that requires grad then gets a leaf example, for which AOTAutograd hides its writes too
    (``detach().copy_``); any other such value gets a non-leaf, whose writes it records (segments._example), so a
    hidden write of it is refused there (fuzzer s1601_1024: the recorded copy raised on a custom Function's view).
    Where the segment's nodes ``within`` write data of it, only theirs count: AOTAutograd applies those, the others
    run in other segments (s1821_743: ``MarkDirty.apply(t0)`` run in eager, then ``t0.detach().mul_(3)``)."""

    def hidden(nodes: Sequence[fx.Node]) -> list[bool]:
        return [
            hidden_from_autograd(meta, n, w)
            for n in nodes
            if graph_ops.is_data_mutation(n)
            for w in graph_ops.written_args(n)
            if meta.root.get(w, w) is root
        ]

    writes = (within is not None and hidden(within)) or hidden(meta.nodes)
    return bool(writes) and all(writes)


def output_nodes(nodes: list[fx.Node]) -> list[fx.Node]:
    return [a for a in ti.tree_leaves(nodes[-1].args[0]) if isinstance(a, fx.Node)]


def numel(n: fx.Node) -> int | None:
    value = n.meta.get("val")
    return value.numel() if isinstance(value, torch.Tensor) else None


def taken_at(n: fx.Node, order: dict[fx.Node, int], *, with_base: bool = True) -> int:
    """Where the value ``n`` reads was taken: the earliest of ``n`` and the views (and in-place view changes) it
    is derived from, down to the value they view (a view of ``t1 = t0[0]`` made after ``t0.copy_(a)`` still sees
    ``t0``'s old value); without that value where not ``with_base`` (the first view of the chain)."""
    taken = order[n]
    while True:
        if graph_ops.is_metadata_mutation(n):  # ``t3.unsqueeze_(2)`` is still the view ``t3``
            n = graph_ops.mutated_input(n)  # type: ignore[assignment]
        elif is_any_view(n) and isinstance(n.args[0], fx.Node):
            n = n.args[0]
        else:
            return taken
        if with_base or graph_ops.is_metadata_mutation(n) or is_any_view(n):
            taken = min(taken, order[n])


def alias_roots(nodes: list[fx.Node], input_alias_groups: Sequence[int] | None) -> dict[fx.Node, fx.Node]:
    """Each node -> the node whose storage it aliases (itself for a fresh value)."""
    placeholders = [n for n in nodes if n.op == "placeholder"]
    root: dict[fx.Node, fx.Node] = {}
    for i, first in enumerate(input_alias_groups or ()):
        root[placeholders[i]] = placeholders[first]
    for n in nodes:
        if n.op == "placeholder":
            root.setdefault(n, n)
        elif is_any_view(n):
            root[n] = root.get(n.args[0], n.args[0])  # type: ignore[arg-type]
        elif (target := graph_ops.mutated_input(n)) is not None:
            root[n] = root.get(target, target)
        else:
            root[n] = n
    return root


def _sym_from_inputs(nodes: list[fx.Node]) -> frozenset[fx.Node]:
    out: set[fx.Node] = set()
    for n in nodes:
        if graph_ops.is_sym(n) and all(i.op == "placeholder" or i in out for i in n.all_input_nodes):
            out.add(n)
    return frozenset(out)


def _requires_grad(
    nodes: list[fx.Node], placeholders: list[fx.Node], grad_enabled: bool, input_requires_grad: Sequence[bool] | None
) -> frozenset[fx.Node]:
    """A differentiable input, read with grad mode on; an in-place write of such a value makes its target require
    grad too. (Traced values are detached snapshots: ``requires_grad`` cannot be read off the graph.) Without
    ``input_requires_grad`` every floating-point input is assumed to require grad."""
    out: set[fx.Node] = set()
    for i, p in enumerate(placeholders):
        value = p.meta.get("val")
        if input_requires_grad is not None:
            if i < len(input_requires_grad) and input_requires_grad[i]:
                out.add(p)
        elif isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()):
            out.add(p)
    grad = grad_enabled
    for n in nodes:
        if graph_ops.is_grad_mode_change(n):
            grad = bool(n.args[0])
        elif graph_ops.sets_requires_grad(n):  # Note [requires_grad_ inside a function] in graph_ops.py
            out |= {n, n.args[0]}  # type: ignore[arg-type]
        elif n.op == "call_function" and grad and any(i in out for i in n.all_input_nodes):
            if graph_ops.schema_name(n) != "detach":  # s1822_82: a Function's output of ``c.detach()`` requires none
                out.add(n)
            if (target := graph_ops.mutated_input(n)) is not None:
                out.add(target)
        elif n.op == "call_function" and graph_ops.mutated_input(n) in out:
            # An in-place call under no_grad returns its target, which still requires grad: what reads the call's
            # result reads that target (fuzzer s1103_903: ``t0.sin_()`` under no_grad, then ``t0.sigmoid()``).
            out.add(n)
    return frozenset(out)


def grad_flow(
    nodes: list[fx.Node], grad_enabled: bool, input_requires_grad: Sequence[bool]
) -> tuple[frozenset[fx.Node], frozenset[fx.Node]]:
    """(The calls autograd records: run with grad mode on, reading a value that requires grad; the values that
    require grad.) An ATen graph or Dynamo's (whose method calls count too); ``detach`` ends the flow."""
    placeholders = [n for n in nodes if n.op == "placeholder"]
    requires_grad = {p for p, r in zip(placeholders, input_requires_grad) if r}
    recorded: set[fx.Node] = set()
    grad = grad_enabled
    for n in nodes:
        if graph_ops.is_grad_mode_change(n):
            grad = bool(n.args[0])
        elif n.op in ("call_function", "call_method") and any(i in requires_grad for i in n.all_input_nodes):
            target = graph_ops.mutated_input(n)
            if grad:
                recorded.add(n)
            if (grad or target in requires_grad) and graph_ops.schema_name(n) != "detach" and n.target != "detach":
                requires_grad.add(n)
    return frozenset(recorded), frozenset(requires_grad)


def _under_no_grad(nodes: list[fx.Node], grad_enabled: bool) -> frozenset[fx.Node]:
    out: set[fx.Node] = set()
    grad = grad_enabled
    for n in nodes:
        if graph_ops.is_grad_mode_change(n):
            grad = bool(n.args[0])
        elif not grad:
            out.add(n)
    return frozenset(out)


def eager_requires_grad(meta: GraphMeta, n: fx.Node) -> bool:
    """Whether eager's value of ``n`` requires grad. An in-place call returns its target, which keeps requiring
    grad when the call runs under no_grad (the record counts the call's result as made under no_grad); a call run
    eagerly is asked on its inputs (a custom Function's output requires grad where one of them does)."""
    while True:
        if n in meta.requires_grad:
            return True
        if graph_ops.runs_eagerly(n) or (n.target is operator.getitem and graph_ops.runs_eagerly(n.args[0])):
            source = n if graph_ops.runs_eagerly(n) else n.args[0]
            return meta.grad_enabled and any(eager_requires_grad(meta, i) for i in source.all_input_nodes)
        target = graph_ops.mutated_input(n)
        if target is None:
            return False
        n = target


def grad_mode_before(meta: GraphMeta, at: fx.Node) -> bool:
    grad = meta.grad_enabled
    for n in meta.nodes[: meta.order[at]]:
        if graph_ops.is_grad_mode_change(n):
            grad = bool(n.args[0])
    return grad


def start_of_grad_mode_region(meta: GraphMeta, at: fx.Node) -> fx.Node:
    """``at``, or the grad-mode change that began the region holding it."""
    start, grad = at, meta.grad_enabled
    for n in meta.nodes[: meta.order[at]]:
        if graph_ops.is_grad_mode_change(n):
            start = n if grad == meta.grad_enabled else start
            grad = bool(n.args[0])
    return at if grad == meta.grad_enabled else start


def end_of_grad_mode_region(meta: GraphMeta, at: fx.Node) -> fx.Node | None:
    """``at``, or where the grad-mode region holding it ends (``with torch.no_grad(): y.mul_(2)`` is cut after
    the ``with``): each half must end in the grad mode it began in."""
    grad = meta.grad_enabled
    for n in meta.nodes[: meta.order[at] + 1]:
        if graph_ops.is_grad_mode_change(n):
            grad = bool(n.args[0])
    if grad == meta.grad_enabled:
        return at
    for n in meta.nodes[meta.order[at] + 1 :]:
        if graph_ops.is_grad_mode_change(n) and bool(n.args[0]) == meta.grad_enabled:
            return n
    return None


def as_input_alias(meta: GraphMeta, value: torch.Tensor, example_inputs: Sequence[object]) -> torch.Tensor:
    """A traced ``value`` that shares a graph input's storage (a custom Function returned its input: Note
    [Segments]), as that input's example viewed with the traced geometry, so a segment handed it sees the alias
    eager's value has (Note [Inputs that alias each other] in analysis.py); ``value`` itself where it shares none,
    or where the geometry is symbolic (the trace's symbols are not the examples')."""
    if not _static_geometry(value):
        return value
    examples = dict(zip(meta.placeholders, example_inputs))
    for p in _inputs_sharing_storage(meta, value):
        if isinstance(example := examples.get(p), torch.Tensor) and p.meta["val"].dtype == value.dtype:
            return example.detach().as_strided(value.shape, value.stride(), value.storage_offset())
    return value


def symbolic_input_alias(meta: GraphMeta, value: object) -> fx.Node | None:
    """The graph input whose storage a traced ``value`` of symbolic geometry shares (a custom Function returned its
    input under dynamic shapes), which ``as_input_alias`` cannot lay over that input's example; None otherwise."""
    if not isinstance(value, torch.Tensor) or _static_geometry(value):
        return None
    return next(_inputs_sharing_storage(meta, value), None)


def _static_geometry(value: torch.Tensor) -> bool:
    return all(isinstance(g, int) for g in (*value.shape, *value.stride(), value.storage_offset()))


def _inputs_sharing_storage(meta: GraphMeta, value: torch.Tensor) -> Iterator[fx.Node]:
    """The graph inputs whose traced value shares ``value``'s storage, in order."""
    storage = ti.StorageWeakRef(value.untyped_storage())
    for p in meta.placeholders:
        traced = p.meta.get("val")
        if isinstance(traced, torch.Tensor) and ti.StorageWeakRef(traced.untyped_storage()) == storage:
            yield p
    if all(isinstance(g, int) for g in (*value.shape, *value.stride(), value.storage_offset())):
        return None
    storage = ti.StorageWeakRef(value.untyped_storage())
    for p in meta.placeholders:
        traced = p.meta.get("val")
        if isinstance(traced, torch.Tensor) and ti.StorageWeakRef(traced.untyped_storage()) == storage:
            return p
    return None
