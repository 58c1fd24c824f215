"""Stage 2: decide which nodes of a pre-dispatch graph are replayed in eager after the compiled core.

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
reads an alias after the write, or may save it). A write under no_grad, in a graph called with grad mode on, to
inputs that require grad is replayed even where no replayed view or output follows it, and never kept in the core:
AOTAutograd (torch 2.13) applies a synthetic base's write after its compiled function with a ``copy_`` autograd
records, no_grad region or not, so the inputs' history gains a ``CopyBackwards`` and the gradient through
everything before the write becomes zero (fuzzer s1819_134, ``compile_function``, whose core read both inputs
where Dynamo's graph read one).
The fallback rules, with Notes [Mutations the epilogue must not replay] and [A view taken under no_grad keeps
its base's requires_grad], are in fallback_rules.py; what they read, in graph_meta.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import fx

from . import fallback_rules as rules
from . import graph_break_rules, graph_ops, output_rules, storage_rules
from .fallbacks import Fallback
from .graph_meta import NO_GRAPH_BREAKS, GraphBreaks, GraphMeta, graph_meta, is_any_view
from .saved_value_rules import write_to_a_value_a_backward_saved


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
    # Core nodes the compiled backward recomputes rather than saves (Note [Bases the compiled backward must not
    # save] in output_rules.py).
    recompute: frozenset[fx.Node] = frozenset()


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
    meta = graph_meta(
        gm,
        grad_enabled=grad_enabled,
        input_alias_groups=input_alias_groups,
        input_requires_grad=input_requires_grad,
        graph_breaks=graph_breaks,
    )
    return select_epilogue_from(meta)


def select_epilogue_from(meta: GraphMeta) -> EpilogueSelection | Fallback:
    selection = _select(meta, replay_aliased_input_writes=True)
    if (
        isinstance(selection, Fallback)
        and not _hidden_aliased_input_writes(meta)
        and any(graph_ops.mutated_input(n) in meta.aliased_inputs | meta.restricted_inputs for n in meta.nodes)
    ):
        # Note [Inputs that alias each other]: the other placement may replay what this one cannot.
        in_core = _select(meta, replay_aliased_input_writes=False)
        if not isinstance(in_core, Fallback):
            return in_core
    return selection


def _hidden_aliased_input_writes(meta: GraphMeta) -> list[fx.Node]:
    """The writes under no_grad to an input that aliases another, of a storage whose inputs require grad, in a
    graph called with grad mode on (else AOTAutograd's write is no more recorded than eager's): Note [Inputs that
    alias each other]."""
    if not meta.grad_enabled:
        return []
    grad_roots = {meta.root.get(p, p) for p in meta.aliased_inputs if p in meta.requires_grad}
    return [
        n
        for n in meta.mutations
        if n in meta.no_grad
        and any(w in meta.aliased_inputs and meta.root.get(w, w) in grad_roots for w in graph_ops.written_args(n))
    ]


def _restricted_input_writes(meta: GraphMeta) -> list[fx.Node]:
    """The writes of an input that is a restricted view requiring grad: AOTAutograd's write of it raises where eager's
    does not (Note [A restricted view aliased by a write] in runtime.py), so the replay placement replays them."""
    return [n for n in meta.mutations if any(w in meta.restricted_inputs for w in graph_ops.written_args(n))]


def _select(meta: GraphMeta, *, replay_aliased_input_writes: bool) -> EpilogueSelection | Fallback:
    fallback = rules.call_to_run_eagerly(meta) or rules.input_write_its_backward_reads(meta)
    fallback = fallback or write_to_a_value_a_backward_saved(meta)
    if (fallback := fallback or storage_rules.storage_change(meta)) is not None:
        return fallback
    # Note [An eval dropout of an input the core reads]: which dropouts stay depends on what the core reads.
    epilogue = _epilogue(meta, replay_aliased_input_writes, frozenset())
    if kept := output_rules.eval_dropouts_kept_in_core(meta, epilogue):
        epilogue = _epilogue(meta, replay_aliased_input_writes, kept)

    def recomputable(n: fx.Node) -> bool:
        """A mutation replayed in eager whose value the core can compute out of place for its own readers.

        Not under no_grad: the in-place write keeps its target's autograd history, the out-of-place value would
        not require grad.
        """
        target = graph_ops.mutated_input(n)
        if target is None or graph_ops.out_of_place(n.target) is None or n in meta.no_grad:
            return False
        if graph_ops.is_metadata_mutation(n):
            return True
        while graph_ops.is_data_mutation(target):  # a chain of in-place calls on the base itself
            target = graph_ops.mutated_input(target)  # type: ignore[assignment]
        return target.op == "placeholder" or meta.root[target] is target

    if (fallback := rules.replay_order(meta, epilogue, recomputable)) is not None:
        return fallback
    toggles = _grad_mode_changes_to_replay(meta, epilogue)
    tainted = _tainted(meta, epilogue, recomputable)
    duplicated: set[fx.Node] = set()
    stack = [i for n in meta.nodes[:-1] if n not in epilogue for i in n.all_input_nodes if i in epilogue]
    while stack:
        n = stack.pop()
        if n in duplicated or n not in epilogue:
            continue
        if n in tainted:
            return rules.core_reads_a_replayed_mutation(n, tainted[n])
        duplicated.add(n)
        stack.extend(n.all_input_nodes)
    epilogue |= toggles
    duplicated |= toggles
    for rule in (
        lambda: rules.unreplayable_mutation(meta, epilogue, duplicated),
        lambda: rules.no_grad_view_read_with_grad(meta, epilogue),
        lambda: graph_break_rules.multi_output_view_at_graph_break(meta, epilogue),
        lambda: graph_break_rules.dropout_layout_at_graph_break(meta, epilogue),
        lambda: rules.view_fn_write_under_compiled_autograd(meta, epilogue),
    ):
        if (fallback := rule()) is not None:
            return fallback

    resolved: dict[fx.Node, fx.Node] = {}
    externals: list[fx.Node] = []
    for n in meta.nodes:
        if n in epilogue or n.op in ("placeholder", "output"):
            continue
        if not any(u in epilogue or u is meta.output for u in n.users):
            continue
        source = _resolve_input_mutation(n)
        if source is not None:
            resolved[n] = source
        else:
            externals.append(n)
    if (fallback := output_rules.unreproduced_output_alias(meta, epilogue, resolved, externals, kept)) is not None:
        return fallback
    if (fallback := output_rules.core_writes_through_a_view(meta, epilogue, externals)) is not None:
        return fallback
    recompute = output_rules.bases_to_recompute(meta, epilogue, duplicated, externals)
    recompute |= output_rules.results_to_watch(meta, epilogue, duplicated)
    return EpilogueSelection(frozenset(epilogue), frozenset(duplicated), tuple(externals), resolved, recompute)


def _epilogue(meta: GraphMeta, replay_aliased_input_writes: bool, kept: frozenset[fx.Node]) -> set[fx.Node]:
    """Rules 1-3 of Note [Which nodes the epilogue replays], the dropouts ``kept`` and their views in the core."""
    root, order = meta.root, meta.order
    epilogue: set[fx.Node] = set()

    def replayable(n: fx.Node) -> bool:
        if n in kept:
            return False  # Note [An eval dropout of an input the core reads]
        if is_any_view(n) and output_rules.views_a_kept_eval_dropout(n, kept):
            return False  # the same Note
        if is_any_view(n) or n in meta.sym_from_inputs:
            return True
        target = graph_ops.mutated_input(n)
        if target is None:
            return False
        if graph_ops.is_metadata_mutation(n):
            return True
        if target in meta.aliased_inputs or target in meta.restricted_inputs:  # Note [Inputs that alias each other]
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

    for n in meta.output.all_input_nodes:
        pull(n)
    if replay_aliased_input_writes:  # Note [Inputs that alias each other]: AOTAutograd would record it
        for n in _hidden_aliased_input_writes(meta) + _restricted_input_writes(meta):
            pull(n)
    changed = True
    while changed:  # rule 3 can pull in views (rule 2), which can pull in earlier mutations
        changed = False
        first_view: dict[fx.Node, int] = {}
        for n in epilogue:
            if is_any_view(n):
                first_view[root[n]] = min(first_view.get(root[n], len(meta.nodes)), order[n])
        for m in meta.mutations:
            if m not in epilogue and order[m] > first_view.get(root[m], len(meta.nodes)):
                epilogue.add(m)
                for i in m.all_input_nodes:
                    pull(i)
                changed = True
    return epilogue


# Note [An eval dropout of an input the core reads]
# ``dropout`` in eval mode returns its input itself (Note [Ops that return their input] in graph_ops.py), so the
# epilogue replays it and the caller gets the input back, as in eager. If the core also computes from that input,
# AOTAutograd's partitioner may save the input (or an alias of it) to recompute a chain in the backward, where
# eager saved the chain's end. A caller who then writes the returned tensor bumps the input's version counter and
# the compiled backward raises "modified by an inplace operation" where eager runs (fuzzer s704_253). Only
# compiled readers count: which those are is read off the epilogue that replays every such dropout (a write the
# epilogue replays reading the dropout is eager's own call: s1817_1706, where keeping it gave stock's wrong values
# and a second backward through the kept dropout's saved mask raised). Stock has
# the same exposure for every op that returns its input (``type_as``, ``contiguous``), but on torch 2.13 its
# decomposition of eval dropout returns ``input.clone()``, so stock runs. There the dropout stays in the core and
# returns a fresh tensor, stock's answer; on a torch whose decomposition returns the input, stock returns the input
# too and the epilogue replays it. Views of a kept dropout stay in the core with it and come back as stock returns
# them (output_rules.views_a_kept_eval_dropout): replayed, they were eager's views of another base than eager's,
# whose writes the compiled backward saw (fuzzer s1312_67) or a write to the dropout broke (s1003_784).


def _tainted(
    meta: GraphMeta, epilogue: set[fx.Node], recomputable: Callable[[fx.Node], bool]
) -> dict[fx.Node, fx.Node]:
    """Epilogue nodes whose value depends on a mutation replayed in eager that the core cannot recompute, each
    with the first such mutation it depends on.

    A metadata mutation (t_, unsqueeze_) or an in-place call on a base itself (add_, copy_) does not taint: the
    core computes the same value out of place (t, add); see functionalize._core_graph.
    """
    tainted: dict[fx.Node, fx.Node] = {}
    for n in meta.nodes:
        if n not in epilogue:
            continue
        if graph_ops.mutated_input(n) is not None and not recomputable(n):
            tainted[n] = n
        elif (source := next((tainted[i] for i in n.all_input_nodes if i in tainted), None)) is not None:
            tainted[n] = source
    return tainted


def _grad_mode_changes_to_replay(meta: GraphMeta, epilogue: set[fx.Node]) -> set[fx.Node]:
    """Views created under ``torch.no_grad()`` inside the graph need the same grad mode when replayed.

    Then every grad-mode change is replayed in the epilogue too, in program order (and kept in the core for the
    core's own nodes). A Dynamo or make_fx graph ends in the grad mode it started in, so the epilogue does too.
    """
    grad = meta.grad_enabled
    for n in meta.nodes:
        if graph_ops.is_grad_mode_change(n):
            grad = bool(n.args[0])
        elif n in epilogue and grad != meta.grad_enabled and not graph_ops.is_sym(n):
            return set(meta.grad_mode_changes)
    return set()


def _resolve_input_mutation(n: fx.Node) -> fx.Node | None:
    """``x.add_(1)`` on a graph input x has x itself as its value once the core has run."""
    while (target := graph_ops.mutated_input(n)) is not None and target.op != "placeholder":
        if is_any_view(target):
            return None
        n = target
    if target is not None and target.op == "placeholder":
        return target
    return None
