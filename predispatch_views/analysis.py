"""Stage 2a: decide which nodes of a pre-dispatch graph are replayed in eager after the compiled core.

Note [Replaying pre-dispatch views]
A pre-dispatch graph records each call at the level autograd sees it. Replaying ``aten.unbind.int(base, 0)``
in eager on a tensor ``base`` therefore runs the same autograd kernel eager ran for the user's
``base.unbind(0)``: one ``UnbindBackward0`` shared by all outputs, outputs that are real views of ``base`` with
CreationMeta MULTI_OUTPUT_NODE, and the same version counter. If ``base`` holds the values eager's base held
when the view was taken, and its own history is the same up to an opaque compiled node, every observable
property of the outputs (values, ``_base``, ``grad_fn`` type, in-place errors, gradients) is eager's.

Note [Which nodes the epilogue replays]
The epilogue E is the smallest set that satisfies:
1. Every view call (and every ``getitem`` of a multi-output view call) whose result reaches an output through
   view calls only is in E. So are size computations (``sym_size``, ``//``...) that those calls need and that
   depend on graph inputs only: they are recomputed from the real tensors (dynamic shapes).
2. A mutation that writes through a view in E (``out = y.view(-1); out.mul_(2); return out``) is in E, and so
   is a metadata mutation (``t_``, ``squeeze_``) that feeds E: functionalization would turn either into a view
   the core must return, which is exactly what the design avoids.
3. A mutation of a base after a view of it in E was taken (``outs = y.unbind(0); y.add_(1)``) is in E:
   eager then errors lazily on the outputs' grad_fn, and only eager replay reproduces that.
4. If a node of E was created under a grad-mode change inside the graph (``with torch.no_grad(): y.unbind(0)``),
   every grad-mode change is replayed too (CreationMeta NO_GRAD_MODE depends on it).
Everything else is the core. A mutation of a base *before* its views are taken stays in the core: the core is
functionalized and returns the mutated value, which the epilogue then views (see functionalize.py).
Replaying E after the whole core is sound only if every core node sees the values it saw in the program. A
mutation in E whose value the core also needs is given to the core in its out-of-place form (``t_`` -> ``t``,
``add_`` -> ``add``) when it applies to a base itself; a mutation through a view, or a core read of an alias
taken before the mutation, makes the program fall back.

Note [Mutations the epilogue must not replay]
Moving a mutation from its place in the program to after the whole core is invisible to eager's autograd only
if nothing the core did depends on when it happens. Two kinds of mutation break that, and make the program
fall back:
- a random in-place op (``uniform_``, ``bernoulli_``, in-place dropout): replayed, it draws after every random
  op of the core instead of between them, and a core reader recomputing it out of place would draw twice;
- a data mutation of a base (a graph input or an intermediate, or a view of one) when a differentiable op of
  the core computes from that base and its backward needs values (``sin``, ``mul`` of two tensors...): the
  core is one opaque autograd node whose saved tensors AOTAutograd's partitioner chooses, and it may save the
  base and recompute from it.
  Eager may have saved a later intermediate instead, so the replayed write would bump the version of a tensor the
  compiled backward checks, an error eager does not raise. Ops whose backward reads no input (``add``, ``mul``
  by a number, ``sum``) cannot make the partitioner save anything, and are looked through. The op that produced
  the base counts too when its backward reads its result (``sigmoid``, ``exp``) and the base is read after the
  write (views taken before it raise eager's lazy error first): eager raises then as well, but its message
  names the node that saved the tensor, which the compiled backward's cannot.

Note [Inputs that alias each other]
Inputs that share a storage (``c, d = base[:-1], base[1:]``) are views of a base the graph does not see; the rules
above treat them as one base (``root``, the first of them). A write to one of them can be placed either way:
replayed in eager as a write through a view (rule 2: the epilogue's views then see eager's own ``CopySlices``),
or kept in the core, which AOTAutograd functionalizes against a synthetic base. The choice must not depend on
the inputs' order, which differs between entry points (Dynamo orders inputs by first use, compile_function by
the signature): kept in the core, the write puts the core's one opaque backward on the path of the outputs
viewing it, and that backward writes a zero gradient into any other written input's history where eager leaves
None (fuzzer s31_409: the backend replayed the write, compile_function did not). So the replay placement is
tried first for every such input, and the core placement only when the replay plan must fall back (the core
reads an alias after the write, or may save it).

Note [A view taken under no_grad keeps its base's requires_grad]
Eager answers ``requires_grad`` of a view from its base: ``with torch.no_grad(): v = x.expand(...)`` gives a
``v`` that requires grad when ``x`` does, with no ``grad_fn`` and no gradient edge (CreationMeta NO_GRAD_MODE;
a view of ``v`` inherits both). An op run on ``v`` with grad mode on therefore returns a result that requires
grad and sends no gradient anywhere; an op that returns its input under no_grad (``dropout`` with p=0,
``contiguous`` of a contiguous tensor: Note [Ops that return their input]) is ``x`` itself, so gradients even
flow through it. The compiled core computes the no_grad region below autograd: its results neither require
grad nor carry one. So a core op with grad mode on that reads such a value falls back when eager's answer
differs from the core's (the result would not require grad, or gradients would flow through an identity).
A graph that ends at a graph break and returns a NO_GRAD_MODE view falls back too: when the code Dynamo runs
between the graphs writes the view's base in place (``a.unsqueeze_(2)`` is such a break), eager forbids reading
the view's ``grad_fn``, and Dynamo reads ``is_leaf`` when it wraps the view as an input of the next graph
(``fake_tensor.from_real_tensor``), so it would crash where eager runs; stock returns a view autograd allows.
The graph Dynamo resumes with falls back too when it returns a NO_GRAD_MODE view of one of its inputs: that input
may be the fallen-back graph's output, stock's view, which autograd lets the caller write in place where eager's
would not; eager's no_grad view of it then refuses its ``grad_fn``, stock's does not (fuzzer s31_447). Each graph
is compiled alone, so the rule cannot ask whether the graph before fell back.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree
from torch import fx

from . import _torch_internals as ti
from . import graph_ops


@dataclass(frozen=True)
class EpilogueSelection:
    """The nodes of a pre-dispatch graph replayed in eager, and what the core must hand them."""

    epilogue: frozenset[fx.Node]
    # Epilogue nodes the core also needs; the core gets its own copy (view calls are free to duplicate).
    duplicated: frozenset[fx.Node]
    # Values the epilogue or the output reads from the core, in program order (never placeholders).
    externals: tuple[fx.Node, ...]
    # An external that is a data mutation of a graph input resolves to the input itself (mutated by the core).
    resolved: dict[fx.Node, fx.Node]


@dataclass(frozen=True)
class GraphBreaks:
    """Where Dynamo split the user's function around a graph (neither, outside Dynamo)."""

    before: bool = False  # the graph is a resume function's: its inputs may be an earlier graph's outputs
    after: bool = False  # the graph ends at a graph break: a resume function gets its outputs


NO_GRAPH_BREAKS = GraphBreaks()


@dataclass(frozen=True)
class Fallback:
    reason: str


def select_epilogue(
    gm: fx.GraphModule,
    *,
    grad_enabled: bool,
    input_alias_groups: Sequence[int] | None = None,
    input_requires_grad: Sequence[bool] | None = None,
    graph_breaks: GraphBreaks = NO_GRAPH_BREAKS,
) -> EpilogueSelection | Fallback:
    """Pick the epilogue of a pre-dispatch graph; see Note [Which nodes the epilogue replays].

    ``input_alias_groups[i]`` is the index of the first input sharing input i's storage: inputs that alias each
    other are one base for the rules below (a mutation of one after a view of the other is replayed in eager).
    ``input_requires_grad[i]`` says whether input i requires grad (the traced values do not record it).
    ``graph_breaks``: where Dynamo split the user's function around this graph.
    """
    args = (gm, grad_enabled, input_alias_groups, input_requires_grad, graph_breaks)
    selection = _select(*args, replay_aliased_input_writes=True)
    aliased = _aliased_inputs(gm, input_alias_groups)
    if isinstance(selection, Fallback) and any(graph_ops.mutated_input(n) in aliased for n in gm.graph.nodes):
        # Note [Inputs that alias each other]: the other placement may replay what this one cannot.
        in_core = _select(*args, replay_aliased_input_writes=False)
        if not isinstance(in_core, Fallback):
            return in_core
    return selection


def _aliased_inputs(gm: fx.GraphModule, input_alias_groups: Sequence[int] | None) -> set[fx.Node]:
    """The inputs that share their storage with another input."""
    groups = collections.Counter(input_alias_groups or ())
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    return {placeholders[i] for i, first in enumerate(input_alias_groups or ()) if groups[first] > 1}


def _select(
    gm: fx.GraphModule,
    grad_enabled: bool,
    input_alias_groups: Sequence[int] | None,
    input_requires_grad: Sequence[bool] | None,
    graph_breaks: GraphBreaks,
    *,
    replay_aliased_input_writes: bool,
) -> EpilogueSelection | Fallback:
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    root = _alias_roots(nodes, input_alias_groups)
    output = nodes[-1]
    mutations = [n for n in nodes if graph_ops.mutated_input(n) is not None]

    for n in mutations:
        if graph_ops.is_storage_mutation(n):
            return Fallback(f"{graph_ops.op_name(n)} changes a tensor's storage ({n.name})")

    sym_from_inputs = _sym_from_inputs(nodes)
    aliased_inputs = _aliased_inputs(gm, input_alias_groups)
    epilogue: set[fx.Node] = set()

    def replayable(n: fx.Node) -> bool:
        if graph_ops.is_view(n) or graph_ops.is_view_getitem(n) or n in sym_from_inputs:
            return True
        target = graph_ops.mutated_input(n)
        if target is None:
            return False
        if graph_ops.is_metadata_mutation(n):
            return True
        if target in aliased_inputs:  # Note [Inputs that alias each other]
            return replay_aliased_input_writes
        return root[target] is not target  # a write through a view

    def pull(start: fx.Node) -> None:
        stack = [start]
        while stack:
            n = stack.pop()
            if n in epilogue or not replayable(n):
                continue
            epilogue.add(n)
            stack.extend(n.all_input_nodes)

    for n in output.all_input_nodes:
        pull(n)
    changed = True
    while changed:  # rule 3 can pull in views (rule 2), which can pull in earlier mutations
        changed = False
        first_view: dict[fx.Node, int] = {}
        for n in epilogue:
            if graph_ops.is_view(n) or graph_ops.is_view_getitem(n):
                first_view[root[n]] = min(first_view.get(root[n], len(nodes)), order[n])
        for m in mutations:
            if m not in epilogue and order[m] > first_view.get(root[m], len(nodes)):
                epilogue.add(m)
                for i in m.all_input_nodes:
                    pull(i)
                changed = True

    no_grad = _under_no_grad(nodes, grad_enabled)

    def recomputable(n: fx.Node) -> bool:
        """A mutation replayed in eager whose value the core can compute out of place for its own readers.

        Not under no_grad: the in-place write keeps its target's autograd history, the out-of-place value would
        not require grad.
        """
        target = graph_ops.mutated_input(n)
        if target is None or graph_ops.out_of_place(n.target) is None or n in no_grad:
            return False
        if graph_ops.is_metadata_mutation(n):
            return True
        while graph_ops.is_data_mutation(target):  # a chain of in-place calls on the base itself
            target = graph_ops.mutated_input(target)  # type: ignore[assignment]
        return target.op == "placeholder" or root[target] is target

    if (reason := _check_replay_order(nodes, order, root, epilogue, recomputable)) is not None:
        return Fallback(reason)
    toggles = _grad_mode_changes_to_replay(nodes, epilogue, grad_enabled)

    tainted = _tainted(nodes, epilogue, recomputable)
    duplicated: set[fx.Node] = set()
    stack = [i for n in nodes[:-1] if n not in epilogue for i in n.all_input_nodes if i in epilogue]
    while stack:
        n = stack.pop()
        if n in duplicated or n not in epilogue:
            continue
        if n in tainted:
            return Fallback(f"the compiled region reads {n.name}, produced by a mutation replayed in eager")
        duplicated.add(n)
        stack.extend(n.all_input_nodes)
    epilogue |= toggles
    duplicated |= toggles
    requires_grad = _requires_grad(nodes, grad_enabled, input_requires_grad)
    if (reason := _unreplayable_mutation(nodes, root, epilogue, duplicated, requires_grad)) is not None:
        return Fallback(reason)
    reason = _no_grad_view_read_with_grad(nodes, epilogue, grad_enabled, requires_grad, graph_breaks)
    if reason is not None:
        return Fallback(reason)
    if graph_breaks.after and (reason := _multi_output_view_at_graph_break(nodes, root, epilogue, requires_grad)):
        return Fallback(reason)
    if (reason := _view_fn_under_compiled_autograd(epilogue, ti.compiled_autograd_configured())) is not None:
        return Fallback(reason)

    resolved: dict[fx.Node, fx.Node] = {}
    externals: list[fx.Node] = []
    for n in nodes:
        if n in epilogue or n.op in ("placeholder", "output"):
            continue
        readers = [u for u in n.users if u in epilogue or u is output]
        if not readers:
            continue
        source = _resolve_input_mutation(n)
        if source is not None:
            resolved[n] = source
        else:
            externals.append(n)
    if (reason := _unreproduced_output_alias(nodes, epilogue, resolved, externals)) is not None:
        return Fallback(reason)
    if (reason := _core_writes_through_a_view(nodes, root, epilogue, externals)) is not None:
        return Fallback(reason)
    return EpilogueSelection(frozenset(epilogue), frozenset(duplicated), tuple(externals), resolved)


def _unreproduced_output_alias(
    nodes: list[fx.Node], epilogue: set[fx.Node], resolved: dict[fx.Node, fx.Node], externals: list[fx.Node]
) -> str | None:
    """The plan check of Note [The invariant] (pipeline.py): an output computed by the core must not alias an
    input or another core value in the trace. Replayed views may alias what they view (the core value the
    epilogue reads, which may itself be returned: ``return *y.unbind(0), y``); any other alias would come back as
    AOTAutograd regenerates it, not as eager made it.
    """
    owners: dict[int, tuple[fx.Node, str]] = {}
    for p in (n for n in nodes if n.op == "placeholder"):
        if isinstance(value := p.meta.get("val"), torch.Tensor):
            owners.setdefault(_storage(value), (p, f"input {p.name}"))
    for n in externals:
        if isinstance(value := n.meta.get("val"), torch.Tensor) and any(u in epilogue for u in n.users):
            owners.setdefault(_storage(value), (n, f"{n.name}, which the epilogue views"))
    outputs = dict.fromkeys(_output_nodes(nodes))
    for k, n in enumerate(outputs):
        value = n.meta.get("val")
        if not isinstance(value, torch.Tensor) or n.op == "placeholder" or n in epilogue or n in resolved:
            continue
        owner, what = owners.setdefault(_storage(value), (n, f"output {k}"))
        if owner is not n:
            return (
                f"output {k} ({n.name}, {graph_ops.op_name(n)}) aliases {what} in the trace, but no view call "
                "the epilogue can replay produces it"
            )
    return None


def _output_nodes(nodes: list[fx.Node]) -> list[fx.Node]:
    """The nodes the graph returns, in order (a node returned twice appears twice)."""
    return [a for a in pytree.tree_leaves(nodes[-1].args[0]) if isinstance(a, fx.Node)]


def _numel(n: fx.Node) -> int | None:
    value = n.meta.get("val")
    return value.numel() if isinstance(value, torch.Tensor) else None


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _alias_roots(nodes: list[fx.Node], input_alias_groups: Sequence[int] | None) -> dict[fx.Node, fx.Node]:
    """Map each node to the node whose storage it aliases (itself for fresh values)."""
    placeholders = [n for n in nodes if n.op == "placeholder"]
    root: dict[fx.Node, fx.Node] = {}
    for i, first in enumerate(input_alias_groups or ()):
        root[placeholders[i]] = placeholders[first]
    for n in nodes:
        if n.op == "placeholder":
            root.setdefault(n, n)
            continue
        if graph_ops.is_view(n) or graph_ops.is_view_getitem(n):
            root[n] = root.get(n.args[0], n.args[0])  # type: ignore[arg-type]
        elif (target := graph_ops.mutated_input(n)) is not None:
            root[n] = root.get(target, target)
        else:
            root[n] = n
    return root


def _sym_from_inputs(nodes: list[fx.Node]) -> set[fx.Node]:
    """Size arithmetic computable from the graph inputs alone."""
    out: set[fx.Node] = set()
    for n in nodes:
        if graph_ops.is_sym(n) and all(i.op == "placeholder" or i in out for i in n.all_input_nodes):
            out.add(n)
    return out


def _tainted(nodes: list[fx.Node], epilogue: set[fx.Node], recomputable: Callable[[fx.Node], bool]) -> set[fx.Node]:
    """Epilogue nodes whose value depends on a mutation replayed in eager that the core cannot recompute.

    A metadata mutation (t_, unsqueeze_) or an in-place call on a base itself (add_, copy_) does not taint: the
    core computes the same value out of place (t, add); see functionalize._core_graph.
    """
    tainted: set[fx.Node] = set()
    for n in nodes:
        if n in epilogue and (
            (graph_ops.mutated_input(n) is not None and not recomputable(n))
            or any(i in tainted for i in n.all_input_nodes)
        ):
            tainted.add(n)
    return tainted


def _check_replay_order(
    nodes: list[fx.Node],
    order: dict[fx.Node, int],
    root: dict[fx.Node, fx.Node],
    epilogue: set[fx.Node],
    recomputable: Callable[[fx.Node], bool],
) -> str | None:
    """Replaying E after the whole core must not change what any core node sees.

    A core node that reads a base after an E data mutation of it needs the mutated value: the core recomputes
    it out of place when it can, and only a value derived from that recomputation (not an alias taken before
    the mutation) sees it.
    """
    mutations: dict[fx.Node, list[fx.Node]] = {}
    for n in nodes:
        if n in epilogue and graph_ops.is_data_mutation(n):
            mutations.setdefault(root[n], []).append(n)
    for n in nodes:
        if n in epilogue or n.op == "output":
            continue
        for i in n.all_input_nodes:
            before = [m for m in mutations.get(root.get(i, i), ()) if order[m] < order[n]]
            if not before:
                continue
            if not all(recomputable(m) for m in before):
                return (
                    f"{n.name} reads {i.name} after {before[0].name} mutated its base (through a view, or under "
                    "no_grad), and that mutation must be replayed in eager"
                )
            if _taken_at(i, order) < order[before[-1]]:  # through views taken earlier too (found by the fuzzer)
                return f"{n.name} reads {i.name}, an alias taken before {before[-1].name} mutated its base"
    # The converse: an E write that copies values (``t0.copy_(a)``) must not read them after a later core write
    # of their base has run (fuzzer s43_876: ``t0.copy_(a); a.mul_(2)`` returned twice a).
    core_writes = [m for m in nodes if m not in epilogue and graph_ops.is_data_mutation(m)]
    for n in nodes:
        if n not in epilogue or not graph_ops.is_data_mutation(n):
            continue
        for i in n.all_input_nodes:
            if i is graph_ops.mutated_input(n):
                continue
            later = [m for m in core_writes if root.get(m) is root.get(i, i) and order[m] > order[n]]
            if later:
                return f"{n.name} reads {i.name}, whose base {later[0].name} of the compiled region writes afterwards"
    return None


def _unreplayable_mutation(
    nodes: list[fx.Node],
    root: dict[fx.Node, fx.Node],
    epilogue: set[fx.Node],
    duplicated: set[fx.Node],
    requires_grad: set[fx.Node],
) -> str | None:
    """See Note [Mutations the epilogue must not replay]."""
    for m in nodes:
        if m not in epilogue or graph_ops.mutated_input(m) is None:
            continue
        if graph_ops.is_random(m):
            return (
                f"{m.name} ({graph_ops.op_name(m)}) draws random numbers after a view is taken; replayed after the "
                "compiled region it would draw again, in another order"
            )
        base = root[m]  # a metadata mutation bumps the version counter too
        reader = _may_save(nodes, base, root, epilogue, duplicated, requires_grad)
        if reader is None and _saves_its_result_and_is_read_after(nodes, m, base, root, epilogue, requires_grad):
            reader = base  # sigmoid, exp...: the backward reads the very tensor the epilogue writes
        if reader is not None:
            what = "graph input" if base.op == "placeholder" else "intermediate"
            return (
                f"{m.name} writes to {what} {base.name} after the views are taken, and {reader.name} "
                f"({graph_ops.op_name(reader)}) of the compiled region may save it, or a value computed from "
                "it, for backward"
            )
    return None


def _saves_its_result_and_is_read_after(
    nodes: list[fx.Node],
    m: fx.Node,
    base: fx.Node,
    root: dict[fx.Node, fx.Node],
    epilogue: set[fx.Node],
    requires_grad: set[fx.Node],
) -> bool:
    """The op producing ``base`` saves its result, and something reads the base after the write ``m``.

    Views taken before the write raise eager's lazy error on their ``grad_fn`` before any backward reaches the
    producer (``outs = y.split(2); y.mul_(2); return outs``); only a read after it leads backward there.
    """
    if base not in requires_grad or base in epilogue or not graph_ops.backward_reads_its_result(base):
        return False
    after = nodes[nodes.index(m) + 1 :]
    read = {m, base} | {n for n in after if root.get(n) is base}  # the write, the base, aliases taken after it
    unread_writes = {n for n in after if n in epilogue and graph_ops.mutated_input(n) is not None and not n.users}
    return any(i in read for n in after if n not in unread_writes for i in n.all_input_nodes)


def _may_save(
    nodes: list[fx.Node],
    base: fx.Node,
    root: dict[fx.Node, fx.Node],
    epilogue: set[fx.Node],
    duplicated: set[fx.Node],
    requires_grad: set[fx.Node],
) -> fx.Node | None:
    """The first differentiable core op computing from ``base`` whose backward may read values.

    The partitioner may save ``base`` itself for any value the backward needs that is computed from it. Ops
    whose backward reads no input (``add``, ``mul`` by a number, ``sum``, views...) need none, so everything
    downstream of ``base`` through them is checked in turn.
    """
    reached = {base}
    for n in nodes:
        if (n in epilogue and n not in duplicated) or n.op != "call_function":
            continue
        if not any(i in reached or root.get(i) is base for i in n.all_input_nodes):
            continue
        reached.add(n)
        if n in requires_grad and not (
            graph_ops.is_view(n)
            or graph_ops.is_view_getitem(n)
            or graph_ops.is_metadata_mutation(n)  # a view, in place
            or graph_ops.backward_reads_no_input(n)
        ):
            return n
    return None


def _requires_grad(
    nodes: list[fx.Node], grad_enabled: bool, input_requires_grad: Sequence[bool] | None
) -> set[fx.Node]:
    """The nodes whose result requires grad: a differentiable input, read with grad mode on.

    An in-place write of such a value makes its target require grad too. (Traced values are detached
    snapshots, so their ``requires_grad`` cannot be read off the graph.) Without ``input_requires_grad`` every
    floating-point input is assumed to require grad.
    """
    out: set[fx.Node] = set()
    placeholders = [n for n in nodes if n.op == "placeholder"]
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
        elif n.op == "call_function" and grad and any(i in out for i in n.all_input_nodes):
            out.add(n)
            if (target := graph_ops.mutated_input(n)) is not None:
                out.add(target)
    return out


def _no_grad_view_read_with_grad(
    nodes: list[fx.Node],
    epilogue: set[fx.Node],
    grad_enabled: bool,
    requires_grad: set[fx.Node],
    graph_breaks: GraphBreaks,
) -> str | None:
    """Note [A view taken under no_grad keeps its base's requires_grad]."""
    no_grad_views: set[fx.Node] = set()  # CreationMeta NO_GRAD_MODE, base requires grad
    identities: set[fx.Node] = set()  # the input itself, returned under no_grad
    eager_requires_grad = set(requires_grad)
    viewed: dict[fx.Node, fx.Node] = {}  # a view -> the value its chain of views starts from
    grad = grad_enabled
    for n in nodes:
        if graph_ops.is_grad_mode_change(n):
            grad = bool(n.args[0])
            continue
        if n.op != "call_function":
            continue
        is_view = graph_ops.is_view(n) or graph_ops.is_view_getitem(n)
        if is_view:
            source = n.args[0]
            viewed[n] = viewed.get(source, source)  # type: ignore[arg-type]
            if source in identities or (source in eager_requires_grad and graph_ops.may_return_self(n) and not grad):
                identities.add(n)
                eager_requires_grad.add(n)
            elif source in no_grad_views or (source in eager_requires_grad and not grad):
                no_grad_views.add(n)
                eager_requires_grad.add(n)
        if not grad or n in epilogue or is_view:
            continue
        read = [i for i in n.all_input_nodes if i in no_grad_views or i in identities]
        if not read:
            continue
        eager_requires_grad.add(n)
        if n not in requires_grad or any(i in identities for i in read):
            return (
                f"{n.name} ({graph_ops.op_name(n)}) reads {read[0].name}, taken under no_grad from a tensor that "
                "requires grad: eager's result takes requires_grad (from an op that returns its input, gradients "
                "too) from that tensor, the compiled region's would not (Note [A view taken under no_grad keeps "
                "its base's requires_grad])"
            )
    outputs = _output_nodes(nodes)
    for k, n in enumerate(outputs):
        if n not in no_grad_views:
            continue
        if graph_breaks.after:
            return (
                f"output {k} ({n.name}) is a view taken under no_grad from a tensor that requires grad, and "
                "the graph ends at a graph break: Dynamo would crash wrapping it for the next graph if its "
                "base is written in place in between (Note [A view taken under no_grad keeps its base's "
                "requires_grad])"
            )
        if graph_breaks.before and (source := viewed.get(n)) is not None and source.op == "placeholder":
            return (
                f"output {k} ({n.name}) is a view taken under no_grad of input {source.name}, which requires "
                "grad, in a graph Dynamo resumed after a graph break: where the graph before fell back, that "
                "input is stock's view, which the caller may write in place, and eager's view of it would then "
                "refuse its grad_fn (Note [A view taken under no_grad keeps its base's requires_grad])"
            )
    return None


def _multi_output_view_at_graph_break(
    nodes: list[fx.Node], root: dict[fx.Node, fx.Node], epilogue: set[fx.Node], requires_grad: set[fx.Node]
) -> str | None:
    """A replayed output of a multi-output view (or a view of one) that requires grad, in a graph ending at a graph
    break, whose base the code between the graphs can reach: an input, or another output that is no such view.
    Dynamo reads the view's ``grad_fn`` when it wraps it for the resume function, and if the break's own
    instruction wrote that base in place (``c.t_()`` on an input breaks the graph; fuzzer s41_47), eager's view
    refuses it: a crash inside the call where eager raises only if the caller reads ``grad_fn``, and stock, which
    returns no view, runs. A base only the multi-output views themselves reach stays replayed (``q, k =
    lin(x).chunk(2)`` before a ``print``): writing one of them in place with grad enabled is eager's own error.
    Not covered: the break's instruction writing one of them under no_grad (design/04, Known limits).
    """
    multi_output_views: set[fx.Node] = set()
    for n in nodes:
        if graph_ops.is_view_getitem(n) or (graph_ops.is_view(n) and n.args[0] in multi_output_views):
            multi_output_views.add(n)
    outputs = _output_nodes(nodes)
    reachable = {root[n] for n in outputs if n not in multi_output_views} | {n for n in nodes if n.op == "placeholder"}
    for k, n in enumerate(outputs):
        if n in multi_output_views and n in epilogue and n in requires_grad and root[n] in reachable:
            return (
                f"output {k} ({n.name}) is a view from a multi-output view call, returned by a graph that stops "
                "at a graph break: Dynamo would crash wrapping it for the next graph if the code between the "
                f"graphs wrote its base {root[n].name} in place (eager refuses the grad_fn of such a view)"
            )
    return None


# View calls whose autograd view info always carries a view_fn (torch's codegen: VIEW_FUNCTIONS_WITH_METADATA_CHANGE).
_VIEW_FN_VIEWS = {"view_as_real", "view_as_complex", "_conj", "_neg_view"}


def _view_fn_under_compiled_autograd(epilogue: set[fx.Node], compiled_autograd: bool) -> str | None:
    """Under compiled autograd, a replayed write through a view chain that holds a view_fn view (``view_as_real``,
    ``conj``...): eager's ``CopySlices`` then replays the chain through its view_fn, which torch 2.13's compiled
    autograd rejects ("view_fn not supported by compiled autograd"). Stock's graph has no such node and runs;
    Dynamo with ``backend="eager"`` fails the same way (test_autograd.py's test_autograd_inplace_views_cross_dtype
    run dynamo-wrapped)."""
    if not compiled_autograd:
        return None
    for m in epilogue:
        if not graph_ops.is_data_mutation(m):
            continue
        target = graph_ops.mutated_input(m)
        while target is not None and (
            graph_ops.is_view(target) or graph_ops.is_view_getitem(target) or graph_ops.is_metadata_mutation(target)
        ):
            if graph_ops.schema_name(target) in _VIEW_FN_VIEWS:
                return (
                    f"{m.name} writes through {target.name} ({graph_ops.op_name(target)}), whose eager autograd "
                    "node replays views through a view_fn, which compiled autograd (on) rejects"
                )
            source = target.args[0]
            target = source if isinstance(source, fx.Node) else None
    return None


def _under_no_grad(nodes: list[fx.Node], grad_enabled: bool) -> set[fx.Node]:
    out: set[fx.Node] = set()
    grad = grad_enabled
    for n in nodes:
        if graph_ops.is_grad_mode_change(n):
            grad = bool(n.args[0])
        elif not grad:
            out.add(n)
    return out


def _core_writes_through_a_view(
    nodes: list[fx.Node], root: dict[fx.Node, fx.Node], epilogue: set[fx.Node], externals: list[fx.Node]
) -> str | None:
    """A base the epilogue views, or a value returned as it is, must come back from the core as a plain output.
    Written inside the core through a view that covers all of it (``y.view(shape).add_(1)``,
    ``y.unsqueeze(0).normal_()``), AOTAutograd returns it as an alias of the functional result it regenerates it
    from: a view where eager's is none (fuzzer s53_155), and for a base the epilogue views, one made inside its
    autograd.Function (CreationMeta IN_CUSTOM_FUNCTION), whose replayed views eager's in-place writes would be
    refused. Writes through a partial view (``y[0].add_(1)``) come back as plain outputs.
    """
    viewed = {n for n in externals if any(u in epilogue for u in n.users)}
    returned = {
        n for n in _output_nodes(nodes) if n in externals and not (graph_ops.is_view(n) or graph_ops.is_view_getitem(n))
    }
    bases = viewed | returned
    for m in nodes:
        target = graph_ops.mutated_input(m)
        if m in epilogue or target is None or not graph_ops.is_data_mutation(m):
            continue
        if not (graph_ops.is_view(target) or graph_ops.is_view_getitem(target)):
            continue
        for base in bases:
            if root.get(target) is root.get(base) and _numel(target) == _numel(base):
                what = "the epilogue views it" if base in viewed else "returns it, which eager returns as no view"
                return (
                    f"the compiled region writes to {base.name} through a view ({m.name}), and {what}: "
                    "AOTAutograd would return it as an alias of its own base"
                )
    return None


def _taken_at(n: fx.Node, order: dict[fx.Node, int]) -> int:
    """Where the value ``n`` reads was taken: the earliest of ``n`` and the views (and in-place view changes) it
    is derived from, down to the value they view (a view of ``t1 = t0[0]`` made after ``t0.copy_(a)`` still sees
    ``t0``'s old value)."""
    taken = order[n]
    while True:
        if graph_ops.is_metadata_mutation(n):  # ``t3.unsqueeze_(2)`` is still the view ``t3``
            n = graph_ops.mutated_input(n)  # type: ignore[assignment]
        elif (graph_ops.is_view(n) or graph_ops.is_view_getitem(n)) and isinstance(n.args[0], fx.Node):
            n = n.args[0]
        else:
            return taken
        taken = min(taken, order[n])


def _grad_mode_changes_to_replay(nodes: list[fx.Node], epilogue: set[fx.Node], grad_enabled: bool) -> set[fx.Node]:
    """Views created under ``torch.no_grad()`` inside the graph need the same grad mode when replayed.

    Then every grad-mode change is replayed in the epilogue too, in program order (and kept in the core for the
    core's own nodes). A Dynamo or make_fx graph ends in the grad mode it started in, so the epilogue does too.
    """
    toggles = [n for n in nodes if graph_ops.is_grad_mode_change(n)]
    grad = grad_enabled
    for n in nodes:
        if graph_ops.is_grad_mode_change(n):
            grad = bool(n.args[0])
        elif n in epilogue and grad != grad_enabled and not graph_ops.is_sym(n):
            return set(toggles)
    return set()


def _resolve_input_mutation(n: fx.Node) -> fx.Node | None:
    """``x.add_(1)`` on a graph input x has x itself as its value once the core has run."""
    while (target := graph_ops.mutated_input(n)) is not None and target.op != "placeholder":
        if graph_ops.is_view(target) or graph_ops.is_view_getitem(target):
            return None
        n = target
    if target is not None and target.op == "placeholder":
        return target
    return None
