"""Stage 2b, continued: the fallback rules about what the compiled core returns (fallback_rules.py has the rest).
A core output must come back from AOTAutograd as eager made it: a plain tensor, or an alias the epilogue
recreates with eager's own view call.

Note [Bases the compiled backward must not save]
The core returns each base the epilogue views, so the caller can reach it: a write to a replayed view
(``t1 = t0.expand_as(t0); t1.mul_(2)``) bumps the base's version counter, as in eager. Eager's backward raises on
that write only where it saved a value of the base's storage. The min-cut partitioner is free to save a core
output in place of what eager saved (``t0 = a.cos()`` instead of ``a - t1``, since ``t0`` is an output anyway), and
its backward then raised where eager's runs (fuzzer s1295_221, a crash where stock runs: stock returns ``t1`` as
no view). Where eager's backward reads no value of the base's storage (asked of torch per call: Note [Which ops
save their result]), the core's nodes of that storage are tagged for recomputation, as activation checkpointing
tags them, so the compiled backward saves none of them. Where eager does read one, eager raises too, and the tag
would only hide it. A random draw is never tagged: recomputed, it would draw again. Only compiled nodes' reads
count: a call run in eager (the epilogue, a Function between segments) saves what eager saves and raises as eager.
The same tag lets a write that runs in eager reach a base the compiled region reads: a mutation replayed after
the core (Note [Mutations the epilogue must not replay]) or one in a later segment or eager call (Note [Segments])
no longer falls back where the region's readers merely may save the base or recompute from it.

Note [What a recomputation may save]
A node tagged for recomputation is recomputed from what the backward holds; the min-cut partitioner, free to go on,
may recompute past it and save the graph's inputs instead, since an input costs no memory. Eager saved no input
there, so a write to that input (or to an alias of it) after the graph, before the backward, made the compiled
backward raise where eager's runs (fuzzer s1502_2277: ``t0 = a.add(1); t0.sum(0).sin_()``, ``t0`` tagged; the
backward saved ``a`` to recompute ``t0`` and the sum, and the graph break's ``b.transpose_``, ``b`` a view of
``a``'s base, bumped its version). So each tensor the core computes from a tagged node is tagged MUST_SAVE: the
recomputation stops at the tagged nodes, and the backward saves values the core computed past them (here the
sum, which eager's ``sin_`` saves too), never an input merely to recompute the tagged ones. And a family is tagged
only where the compiled backward may read a value computed from it: a tag forces the recomputation whether the
backward needs it or not, and the partitioner then saves the family's own inputs (fuzzer s1701_525,
``compile_function``: ``t5 = ScaledClone.apply(a)`` viewed by the epilogue, a random draw elsewhere in the core;
the backward saved the input ``a``, which the caller then wrote).

Note [A write through a view of a base the epilogue views]
``y = x.mul(2); y.unsqueeze(0).mul_(3); return y.split(2)``: a write through a view covering all of a base the
epilogue views comes back from AOTAutograd as an alias of the functional result (core_writes_through_a_view). The
program is cut before the write, or before the grad-mode region holding it (Note [Segments]): ``y`` leaves the
first segment as a plain output, and the next one writes it as an input, which AOTAutograd applies to the real
tensor with ``copy_``; that segment's epilogue views the real ``y``, or returns it as it is (fuzzer s53_155: stock
returns ``y`` as a view). Not for a write hidden from autograd (under no_grad, or through ``detach``) with grad
mode on, to a storage a node autograd records earlier saves a value of: a compiled function bumps the version of
an input it writes that way twice, stock's too, and eager's backward error names the count ("Exp, is at version 1;
expected version 0").
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .fallbacks import Fallback, FallbackKind
from .graph_meta import GraphMeta, hidden_from_autograd, is_any_view, numel, start_of_grad_mode_region
from .saved_aliases import result_watch_name
from .saved_value_rules import saved_values


def unreproduced_output_alias(
    meta: GraphMeta,
    epilogue: set[fx.Node],
    resolved: dict[fx.Node, fx.Node],
    externals: list[fx.Node],
    kept: Collection[fx.Node] = (),
) -> Fallback | None:
    """The plan check of Note [The invariant] (pipeline.py): an output computed by the core must not alias an
    input or another core value in the trace. Replayed views may alias what they view (the core value the
    epilogue reads, which may itself be returned: ``return *y.unbind(0), y``); any other alias would come back as
    AOTAutograd regenerates it, not as eager made it.
    """
    owners: dict[int, tuple[fx.Node, str]] = {}
    for p in meta.placeholders:
        if isinstance(value := p.meta.get("val"), torch.Tensor):
            owners.setdefault(ti.storage_id(value), (p, f"input {p.name}"))
    for n in externals:
        if isinstance(value := n.meta.get("val"), torch.Tensor) and any(u in epilogue for u in n.users):
            owners.setdefault(ti.storage_id(value), (n, f"{n.name}, which the epilogue views"))
    for k, n in enumerate(dict.fromkeys(meta.outputs)):
        value = n.meta.get("val")
        if not isinstance(value, torch.Tensor) or n.op == "placeholder" or n in epilogue or n in resolved:
            continue
        if views_a_kept_eval_dropout(n, kept):
            continue  # returned as stock returns it (Note [An eval dropout of an input the core reads])
        owner, what = owners.setdefault(ti.storage_id(value), (n, f"output {k}"))
        if owner is not n:
            return Fallback(
                FallbackKind.UNREPRODUCED_OUTPUT_ALIAS,
                f"output {k} ({n.name}, {graph_ops.op_name(n)}) aliases {what} in the trace, but no view call "
                "the epilogue can replay produces it",
            )
    return None


def eval_dropouts_kept_in_core(meta: GraphMeta, epilogue: set[fx.Node]) -> frozenset[fx.Node]:
    """The dropouts returning (an alias of) a graph input that compiled code also computes from, with grad, where
    ``epilogue`` replays every such dropout: they stay in the core (Note [An eval dropout of an input the core
    reads] in analysis.py). A reader the epilogue replays is eager's own call, not one the partitioner may save
    an alias for (fuzzer s1817_1706: a write through a detached view read the dropout)."""
    if ti.eval_dropout_is_traced_as_its_input():
        return frozenset()
    kept = set()
    for dropout in meta.nodes:
        if not (graph_ops.is_dropout(dropout) and graph_ops.returns_its_input(dropout)):
            continue
        root = meta.root.get(dropout.args[0])  # type: ignore[arg-type]
        if (
            root is not None
            and root.op == "placeholder"
            and any(
                n in meta.recorded  # what may be saved for a backward (not a no_grad read)
                and n not in epilogue
                and not is_any_view(n)
                and not (
                    graph_ops.is_dropout(n) and graph_ops.returns_its_input(n)
                )  # compiled: a clone, saving nothing
                and n is not meta.output
                and any(meta.root.get(i) is root for i in n.all_input_nodes)
                for n in meta.nodes
            )
        ):
            kept.add(dropout)
    return frozenset(kept)


def views_a_kept_eval_dropout(view: fx.Node, kept: Collection[fx.Node]) -> bool:
    """A view (of a view...) of a dropout kept in the core (``kept``). It stays in the core too: stock's view of
    stock's fresh tensor. Replayed, it was eager's view of another base (not the input), which a write to the
    dropout (eager refuses it on a leaf) made unusable (fuzzer s1003_784), or whose write the compiled backward
    saw (s1312_67). Followed back through in-place writes too, whose result is what they write: a no_grad view
    taken after ``t5.sin_()`` was eager's view of stock's fresh tensor, which a later write with grad made raise on
    its ``grad_fn`` where stock's does not (fuzzer s1812_696)."""
    n = view
    while not graph_ops.is_dropout(n) and n.args and isinstance(n.args[0], fx.Node):
        in_place = graph_ops.is_data_mutation(n) and graph_ops.written_args(n) == [n.args[0]]
        if not (is_any_view(n) or in_place):
            break
        n = n.args[0]
    return n is not view and n in kept


def core_writes_through_a_view(meta: GraphMeta, epilogue: set[fx.Node], externals: list[fx.Node]) -> Fallback | None:
    """A base the epilogue views, or a value returned as it is, must come back from the core as a plain output.
    Written inside the core through a view that covers all of it (``y.view(shape).add_(1)``,
    ``y.unsqueeze(0).normal_()``), AOTAutograd returns it as an alias of the functional result it regenerates it
    from: a view where eager's is none (fuzzer s53_155), and for a base the epilogue views, one made inside its
    autograd.Function (CreationMeta IN_CUSTOM_FUNCTION), whose replayed views eager's in-place writes would be
    refused. Writes through a partial view (``y[0].add_(1)``) come back as plain outputs, unless the chain holds a
    view whose inverse is a view (``y.t()[0]``: functionalization writes back with ``t(slice_scatter(...))``, an
    alias again; fuzzer s702_26).
    """
    root = meta.root
    viewed = {n for n in externals if any(u in epilogue for u in n.users)}
    returned = {n for n in meta.outputs if n in externals and not is_any_view(n)}
    bases = viewed | returned
    for m in meta.mutations:
        target = graph_ops.mutated_input(m)
        if m in epilogue or target is None or not graph_ops.is_data_mutation(m) or not is_any_view(target):
            continue
        for base in bases:
            if root.get(target) is root.get(base) and (
                numel(target) == numel(base) or _written_back_through_a_view(target, base)
            ):
                what = "the epilogue views it" if base in viewed else "returns it, which eager returns as no view"
                return Fallback(
                    FallbackKind.CORE_WRITES_THROUGH_A_VIEW,
                    f"the compiled region writes to {base.name} through a view ({m.name}), and {what}: "
                    "AOTAutograd would return it as an alias of its own base",
                    cut_after=_cut_before_the_write(meta, m, target),
                )
    return None


def _cut_before_the_write(meta: GraphMeta, write: fx.Node, target: fx.Node) -> fx.Node | None:
    """The node to cut after (Note [A write through a view of a base the epilogue views]); None where no cut helps."""
    root = meta.root.get(target, target)
    if (
        meta.grad_enabled
        and hidden_from_autograd(meta, write, target)
        and any(meta.root.get(v, v) is root for n in _savers_before(meta, write) for v in saved_values(n))
    ):
        return None
    start = start_of_grad_mode_region(meta, write)  # each segment ends in the grad mode it began in
    return meta.nodes[meta.order[start] - 1] if meta.order[start] > 0 else None


def _savers_before(meta: GraphMeta, write: fx.Node) -> list[fx.Node]:
    """The nodes autograd records before ``write`` that may save a value (not views: they save none)."""
    return [
        n
        for n in meta.nodes[: meta.order[write]]
        if n in meta.recorded and not is_any_view(n) and n.target is not operator.getitem
    ]


def bases_to_recompute(
    meta: GraphMeta, epilogue: set[fx.Node], duplicated: set[fx.Node], externals: list[fx.Node]
) -> frozenset[fx.Node]:
    """Note [Bases the compiled backward must not save]: the core's copies of each base the epilogue views or
    writes whose value eager's backward never reads, unless recomputing it would draw random numbers again."""
    core = {n for n in meta.nodes if n not in epilogue or n in duplicated}
    recorded = _recorded_in(meta, core)
    marked: set[fx.Node] = set()
    for base in externals:
        if not any(u in epilogue for u in base.users):
            continue
        if (family := unsaved_storage(meta, meta.root[base], core)) and _read_past(meta.nodes, family, core, recorded):
            marked |= family & core
    return frozenset(marked)


def watched_result_family(meta: GraphMeta, root: fx.Node, compiled: set[fx.Node]) -> set[fx.Node] | None:
    """The nodes of ``root``'s storage, whose producer saves its own result (``sigmoid``), where the compiled backward
    may recompute them instead: the runtime's watch of that result then raises eager's error where eager's backward
    reaches the producer (Note [Eager's version error]). None under compiled autograd, which runs no watch."""
    if ti.compiled_autograd_configured() or result_watch_name(root) is None:
        return None
    return unsaved_storage(meta, root, compiled, root)


def unsaved_storage(
    meta: GraphMeta, root: fx.Node, compiled: set[fx.Node], watched: fx.Node | None = None
) -> set[fx.Node] | None:
    """The nodes of ``root``'s storage, where the compiled backward can be told to save none of them (Note [Bases
    the compiled backward must not save]): computed in the graph, drawing no random numbers, and no value of it
    read by the backward of a ``compiled`` node in eager (a call run in eager saves what eager saves) but the result
    of ``watched``, which a watch checks instead (Note [Segments]). None otherwise."""
    if root.op == "placeholder":
        return None
    family = {n for n in meta.nodes if meta.root.get(n) is root}
    # Recomputed in the backward, the family reads its ancestors there: none may be written after it is computed
    # (an input written in place, fuzzer s1311_858: the backward recomputed ``a.clone()`` from the written ``a``).
    written = {meta.root.get(w, w) for m in meta.mutations for w in graph_ops.written_args(m)}
    if any(meta.root.get(a, a) in written for a in graph_ops.reaching(family) - family):
        return None

    recorded = _recorded_in(meta, compiled)
    if any(graph_ops.is_random(n) for n in family) or _eager_saves_any(meta.nodes, family, recorded, watched):
        return None
    return family


def _recorded_in(meta: GraphMeta, compiled: set[fx.Node]) -> Callable[[fx.Node], bool]:
    """Whether a node is one of the ``compiled`` ones autograd records (requires grad, not under no_grad)."""
    return lambda n: n in compiled and n in meta.recorded


def dynamo_bases_to_recompute(nodes: list[fx.Node], epilogue: set[fx.Node], crossing: list[fx.Node]) -> set[fx.Node]:
    """The same for Dynamo's own graph (dynamo_slice.py: no mutation, no crossing value aliasing another): each
    crossing value the epilogue views, with the views of it the core computes too."""

    def recorded(n: fx.Node) -> bool:
        value = n.meta.get("example_value")
        return isinstance(value, torch.Tensor) and value.requires_grad

    marked: set[fx.Node] = set()
    for base in crossing:
        if base.op == "placeholder" or not recorded(base) or not any(u in epilogue for u in base.users):
            continue
        family = {base}
        for n in nodes:  # the views of it (all in the epilogue; the core's copies share the tag)
            if n in epilogue and n.args and n.args[0] in family:
                family.add(n)
        if graph_ops.draws_random(base) or _eager_saves_any(nodes, family, recorded):
            continue
        if _read_past(nodes, family, {n for n in nodes if n not in epilogue}, recorded):
            marked |= family
    return marked


def _read_past(
    nodes: list[fx.Node], family: set[fx.Node], compiled: set[fx.Node], recorded: Callable[[fx.Node], bool]
) -> bool:
    """Whether the compiled backward may read a value computed from ``family``: only then may the partitioner keep
    a value of the family to recompute it. Where it reads none, a recomputation tag only makes it save the family's
    own inputs (Note [What a recomputation may save]). Unknown calls count as reading."""
    reached = set(family)
    for n in nodes:
        if n in family or n not in compiled or not any(i in reached for i in n.all_input_nodes):
            continue
        reached.add(n)
        if recorded(n) and not graph_ops.is_view_getitem(n):
            saved = graph_ops.saved_by_backward(n)
            if saved is None or saved[0] & reached or saved[1]:
                return True
    return False


def _eager_saves_any(
    nodes: list[fx.Node], family: set[fx.Node], recorded: Callable[[fx.Node], bool], watched: fx.Node | None = None
) -> bool:
    """Whether eager's backward reads a value of ``family`` (one storage): a recorded call whose backward reads an
    argument in it, or produces a value in it and reads its result (but ``watched``). Unknown calls count."""
    for n in nodes:
        if n.op not in ("call_function", "call_method") or not recorded(n) or graph_ops.is_view_getitem(n):
            continue
        if n not in family and not any(i in family for i in n.all_input_nodes):
            continue
        saved = graph_ops.saved_by_backward(n)
        if saved is None or saved[0] & family or (saved[1] and n in family and n is not watched):
            return True
    return False


# Views whose functional inverse is a scatter into a fresh tensor (slice_scatter, select_scatter...).
_SCATTERED_BACK = {"slice", "select", "narrow", "split", "split_with_sizes", "unbind", "chunk", "tensor_split"}


def _written_back_through_a_view(target: fx.Node, base: fx.Node) -> bool:
    """Whether functionalization writes ``target`` back into ``base`` through a view op (``t``, ``view``,
    ``unsqueeze``, an in-place metadata change...): the written base then comes back as a view of the scatter."""
    n = target
    while n is not base:
        if graph_ops.is_view_getitem(n):
            n = n.args[0]
        if graph_ops.is_metadata_mutation(n):
            return True
        if not graph_ops.is_view(n) or not isinstance(n.args[0], fx.Node):
            return False
        if graph_ops.schema_name(n) not in _SCATTERED_BACK:
            return True
        n = n.args[0]
    return False


def results_to_watch(meta: GraphMeta, epilogue: set[fx.Node], duplicated: set[fx.Node]) -> set[fx.Node]:
    """The core's nodes of each base whose producer saves its result and that a replayed write hands to a later
    read (Note [Mutations the epilogue must not replay]): recomputed, the core's watch raising eager's error."""
    core = {n for n in meta.nodes if n not in epilogue or n in duplicated}
    tagged: set[fx.Node] = set()
    for m in meta.mutations:
        if m in epilogue and saves_its_result_and_is_read_after(meta, m, meta.root[m], epilogue):
            tagged |= (watched_result_family(meta, meta.root[m], core) or set()) & core
    return tagged


def saves_its_result_and_is_read_after(meta: GraphMeta, m: fx.Node, base: fx.Node, epilogue: set[fx.Node]) -> bool:
    """The op producing ``base`` saves its result, and something reads the base after the write ``m``.

    Views taken before the write raise eager's lazy error on their ``grad_fn`` before any backward reaches the
    producer (``outs = y.split(2); y.mul_(2); return outs``); only a read after it leads backward there.
    """
    if base not in meta.recorded or base in epilogue or not graph_ops.backward_reads_its_result(base):
        return False
    after = meta.nodes[meta.order[m] + 1 :]
    read = {m, base} | {n for n in after if meta.root.get(n) is base}  # the write, the base, aliases taken after
    unread_writes = {n for n in after if n in epilogue and graph_ops.mutated_input(n) is not None and not n.users}
    return any(i in read for n in after if n not in unread_writes for i in n.all_input_nodes)
