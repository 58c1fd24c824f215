"""Stage 2c: segments. A program whose epilogue cannot move a mutation after the whole core is cut in two at
that mutation; each half gets its own core and epilogue, and the halves run one after the other.

Note [Segments]
The epilogue runs after the whole core (Note [Which nodes the epilogue replays] in analysis.py). Some mutations
cannot move there: a write through a view or a random in-place op that compiled code reads afterwards, a write to
a base whose later reader may save it, a replayed copy of values that compiled code writes afterwards. The rule
that finds one (fallback_rules.py) names it as ``cut_after`` (a write through a full view of a base the epilogue
views names the node before it: Note [A write through a view of a base the epilogue views] in output_rules.py).
Instead of falling back, ``cut`` splits the pre-dispatch graph right after that node, in program order:
- ``first``: every node up to the cut node; it returns every value of its own that the second half or the
  program's outputs read (the crossing values), so its own epilogue replays the views among them;
- ``second``: every node after the cut; its inputs are the program inputs it reads and the crossing values.
The runtime calls the first half, then the second with the first's real results, as Dynamo calls the graph
after a graph break with the graph before's. Each half is compiled by ``compile_captured``, so each may be cut
again (the pipeline bounds how often; the first, which reads only the program's inputs, around a write to a value
a backward saved too: s1829_87), and each is checked by every rule on its own. What stays the same: the mutation
runs in eager (the first half's epilogue) where eager runs it, before every op that follows it, on its result.
A cut is refused (the program falls back as before) where the second half would see what the whole program did not:
- the cut lies inside a grad-mode region that does not end (each half must end in the grad mode it began in;
  a cut inside one that ends moves to its end);
- a crossing value is not a tensor (a size: the second half would need it as an input of its own);
- the second half reads a restricted view (a multi-output view's output, a view made under no_grad) of a storage
  with a value requiring grad (else its ``grad_fn`` is None: s1829_602) whose base the first half writes with grad
  mode on after the view was taken: eager reads it only where an op asks for its ``grad_fn`` (``detach`` does not),
  and may raise its lazy error there ("Output 0 of Split is a view and its base ... has been modified inplace"); a
  compiled function asks on every call;
- the second half writes (data or metadata) a value aliasing a crossing value, where an earlier compiled segment
  may save that value for backward (the write bumps its version: eager's backward raises if eager saved it, the
  compiled one where the partitioner did; Note [Mutations the epilogue must not replay]) and eager's backward
  reads some value of its storage (where it reads none, the earlier segment's nodes of that storage are tagged
  for recomputation instead: Note [Bases the compiled backward must not save] in output_rules.py; where only the
  value's producer saves it, as ``sigmoid`` does, too, and that segment's watch raises eager's error: Note [Eager's
  version error]; segment_savers.py), or where a restricted view of it crosses too, a value of its storage requires
  grad and grad mode is on (its lazy error would be read early: Note [A restricted view aliased by a write] in
  runtime.py; with none, its ``grad_fn`` is None and raises nothing; with grad off, no compiled segment reads it:
  s1822_379). Otherwise the second half is a graph whose inputs alias each other and that writes one of them, as a
  graph after a graph break is (Note [Inputs that alias each other] in analysis.py);
- the program's outputs are not a flat tuple.
A crossing value that requires grad reaches the second half's compile as a non-leaf example (``_example``), so
AOTAutograd applies the half's writes to it with autograd recording them, as eager does. A recorded call that must run
in eager (a custom autograd.Function or checkpointed region whose forward returns an input or a view of one: eager
returns a view of the input with the Function's own backward, which AOTAutograd cannot produce) is cut around: the
program before it is compiled, the call runs uncompiled on real tensors (eager's own call, so eager's view and
backward), and the program after it is compiled; the same checks apply to the part after it, which is handed the call's
result as a view of the input it returns (``_example``), so it sees the alias eager's has (s1812_2373: a no_grad write
to that input's base is then replayed after the views). Where the part after the call is refused for a node of its own
(a no_grad or hidden write of the call's view, whose ``grad_fn`` AOTAutograd would read, s1701_803; a write of a handed
restricted view; a read of one whose base was written), the uncompiled part runs through that node too, as eager runs it
(``RunEagerlyThrough``; s1826_125). Where the call writes a value the part before it may save (segment_savers.py), the
uncompiled part starts at that saver, whose node is then eager's own (``RunEagerlyFrom``; s1826_1926), unless a later
hidden write of that storage would be compiled (segment_savers.hidden_write_after). Each segment costs one more compiled
function per call (AOTAutograd's runtime wrappers, one autograd node): scripts/core_parts_cost.py measures it."""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .crossing_values import (
    graph_breaks_of_stage,
    hoist_detaches,
    sources_sharing_storage,
    views_a_dropout_returning_its_input,
)
from .graph_meta import (
    GraphBreaks,
    GraphMeta,
    as_input_alias,
    eager_requires_grad,
    end_of_grad_mode_region,
    grad_mode_before,
    hidden_from_autograd,
    is_any_view,
    only_hidden_writes,
    restricted_view,
    start_of_grad_mode_region,
    symbolic_input_alias,
    taken_at,
    through_a_copy,
)
from .segment_runtime import checking_grad_flags, restoring_grad_mode, segments_runtime
from .segment_savers import RunEagerlyFrom, RunEagerlyThrough, compiled_saver, eager_write_refused, hidden_write_after

log = logging.getLogger("predispatch_views")

Source = tuple[str, Any]  # ("arg", i), (stage name, j), or ("constant", value)


@dataclass(frozen=True)
class Stage:
    """One segment: a graph of the program's nodes in order, compiled, or run as it is (eager's own calls)."""

    name: str
    graph: fx.GraphModule  # one placeholder per source; returns the values later stages or the program read
    sources: tuple[Source, ...]
    compiled: bool
    nodes: tuple[fx.Node, ...]  # the original nodes whose values it returns, in order
    grad_args: frozenset[int] = frozenset()  # inputs an earlier stage's write recorded by autograd made require grad
    members: tuple[fx.Node, ...] = ()  # the original nodes it runs


@dataclass(frozen=True)
class Cut:
    stages: tuple[Stage, ...]
    outputs: tuple[Source, ...]  # where each program output comes from


def compile_in_segments(
    meta: GraphMeta,
    at: fx.Node,
    example_inputs: Sequence[Any],
    compile_half: Callable[[fx.GraphModule, list[Any], GraphBreaks, bool], Any],
    *,
    run_eagerly: bool = False,
    through: fx.Node | None = None,
) -> tuple[list[Any], Callable[..., Any]] | str | None:
    """The program cut after ``at`` (around it, ``run_eagerly``: Note [Segments]), each compiled stage compiled by
    ``compile_half`` (the pipeline, one cut fewer; told if it is the first stage), and the runtime that calls them
    in order; None where it cannot be cut there or a stage falls back; a string where only views would compile."""
    plan = cut(meta, at, run_eagerly=run_eagerly, through=through)
    while run_eagerly:  # Note [Segments], the last case: a wider uncompiled segment
        if isinstance(plan, RunEagerlyThrough) and meta.order[plan.node] > meta.order[through or at]:
            log.debug("cut around %s through %s: %s", at.name, plan.node.name, plan)
            plan = cut(meta, at, run_eagerly=True, through=(through := plan.node))
        elif (
            isinstance(plan, RunEagerlyFrom)
            and meta.order[plan.node] < meta.order[at]
            and not hidden_write_after(meta, through or at, plan.root, at)
        ):
            log.debug("cut around %s from %s: %s", at.name, plan.node.name, plan)
            through, at = through or at, plan.node
            plan = cut(meta, at, run_eagerly=True, through=through)
        else:
            break
    if isinstance(plan, str):
        log.debug("not cut at %s: %s", at.name, plan)
        return None
    compiled: list[Any] = []
    runners: list[Callable[..., Any]] = []
    for stage in plan.stages:
        if not stage.compiled:
            runners.append(restoring_grad_mode(stage.graph.forward))
            continue
        aliased = sources_sharing_storage(meta, plan.stages, stage.sources)
        examples = [_example(meta, plan, s, example_inputs, stage, k in aliased) for k, s in enumerate(stage.sources)]
        breaks = graph_breaks_of_stage(meta, plan, stage)
        program = compile_half(stage.graph, examples, breaks, stage is plan.stages[0])
        if program.fallback is not None:
            log.debug("not cut at %s: a segment falls back: %s", at.name, program.fallback.reason)
            return None
        compiled.append(program)
        runners.append(_checked(meta, plan, stage, program.run))
    if through is not None and not any(map(_computes, compiled)):  # a run of calls that is the whole program
        refusal = "nothing but views would be compiled"  # Note [A graph whose every computing op runs in eager]
        log.debug("not cut at %s: %s", at.name, refusal)
        return refusal
    return compiled, segments_runtime(plan, runners)


def _computes(program: Any) -> bool:
    """Whether a compiled segment (a pipeline.CompiledProgram) compiles an op other than a view."""
    if program.sliced is None:  # a cut program (what its segments compile; none: it runs in eager), or another
        cut = any(note.startswith("cut ") for note in program.notes)
        return any(map(_computes, program.segments)) or not (program.segments or cut)
    ops = (n for n in program.sliced.core.graph.nodes if n.op in ("call_function", "call_method"))
    return any(n.target is not operator.getitem and not is_any_view(n) for n in ops)


def cut(meta: GraphMeta, at: fx.Node, *, run_eagerly: bool = False, through: fx.Node | None = None) -> Cut | str:
    """The program of ``meta`` cut right after ``at``, or around it where ``at`` must run in eager (with every node
    up to ``through``, and to the end of the grad-mode region holding it); a string says why it cannot be cut
    there."""
    nodes, order, output = meta.nodes, meta.order, meta.output
    returned = output.args[0]
    recompute: set[fx.Node] = set()  # Note [Bases the compiled backward must not save] in output_rules.py
    if not isinstance(returned, (tuple, list)) or any(isinstance(r, (tuple, list, dict)) for r in returned):
        return "the program's outputs are not a flat tuple"
    # A get_attr (a recorded call's forward and backward graphs) is no value to hand over: each stage reads its own.
    body = [n for n in nodes if n.op not in ("placeholder", "get_attr") and n is not output]
    if run_eagerly:
        if through is not None:  # a run of calls may start inside a grad-mode region: it then starts with it
            at = start_of_grad_mode_region(meta, at)
        if grad_mode_before(meta, at) != meta.grad_enabled:
            return "the call runs inside a grad-mode region"
        last = at if through is None else end_of_grad_mode_region(meta, through)
        if last is None:
            return "the calls to run in eager end inside a grad-mode region that does not end"
        middle = {n for n in body if order[at] <= order[n] <= order[last]}
        middle |= {u for n in middle for u in n.users if u.op == "call_function" and u.target is operator.getitem}
        groups = [
            ("first", [n for n in body if order[n] < order[at]], True),
            ("middle", [n for n in body if n in middle], False),
            ("second", [n for n in body if order[n] > order[at] and n not in middle], True),
        ]
        for n in (n for n in body if n in middle):
            if (reason := eager_write_refused(meta, n, groups[0][1], recompute)) is not None:
                return reason
        read = {i for n in middle for i in n.all_input_nodes if i not in middle}
        if restricted := [i.name for i in read if restricted_view(meta, i) and through_a_copy(i)]:
            # Eager's call reads a view autograd forbids rebasing, reached through an op that returns its input
            # (an eval dropout): the segment before hands over its own fresh tensor, which the caller can write,
            # and the call's view of it then raises on its grad_fn (fuzzer s1203_834). A restricted view reached
            # through views only is handed over as the segment's epilogue replays it: eager's own.
            return f"the call reads {', '.join(restricted)}, a restricted view"
        if dropouts := [i.name for i in read if views_a_dropout_returning_its_input(i)]:  # fuzzer s1816_616
            return (
                f"the call reads {', '.join(dropouts)}, a dropout's result eager returns as its input, compiled fresh"
            )
    else:
        end = end_of_grad_mode_region(meta, at)
        if end is None:
            return "the cut would lie inside a grad-mode region that does not end"
        groups = [
            ("first", [n for n in body if order[n] <= order[end]], True),
            ("second", [n for n in body if order[n] > order[end]], True),
        ]
        if not groups[1][1]:
            return "nothing follows the cut"
    groups = [g for g in hoist_detaches(meta, groups) if g[1]]  # Note [A detach crosses no cut]
    stage_of = {n: name for name, members, _ in groups for n in members}
    stage_compiled = {name: compiled for name, _, compiled in groups}
    for name, members, compiled in groups:
        if compiled and (reason := _refused(meta, members, stage_of, name, stage_compiled, recompute)) is not None:
            return reason
    stages: list[Stage] = []
    returned_by: dict[fx.Node, Source] = {}
    position = {p: i for i, p in enumerate(meta.placeholders)}
    grad_args: set[int] = set()
    for name, members, compiled in groups:
        inside = set(members)
        graph, env, sources = fx.Graph(), {}, []

        def read(i: fx.Node, graph: fx.Graph = graph, env: dict = env, sources: list = sources) -> fx.Node:
            if i not in env:
                env[i] = graph.placeholder(i.name)
                env[i].meta = dict(i.meta)
                sources.append(("arg", position[i]) if i in position else returned_by[i])
            return env[i]

        for n in members:
            for i in n.all_input_nodes:
                if i.op == "get_attr" and i not in env:
                    env[i] = graph.node_copy(i)
                elif i not in inside:
                    read(i)
            env[n] = graph.node_copy(n, env.__getitem__)
        kept = [n for n in members if any(u not in inside for u in n.users)]
        for j, n in enumerate(kept):
            returned_by[n] = (name, j)
            if not isinstance(n.meta.get("val"), torch.Tensor) and any(u is not output for u in n.users):
                return f"{n.name}, which a later segment reads, is not a tensor"
        graph.output(tuple(env[n] for n in kept))
        ti.mark_must_recompute(env[n] for n in members if n in recompute)
        parts = (tuple(sources), compiled, tuple(kept), frozenset(grad_args), tuple(members))
        stages.append(Stage(name, fx.GraphModule(meta.gm, graph), *parts))
        written = (meta.root.get(graph_ops.mutated_input(n)) for n in members if n in meta.requires_grad)
        grad_args |= {position[r] for r in written if r in position}
    outputs: list[Source] = []
    for r in returned:
        if not isinstance(r, fx.Node):
            outputs.append(("constant", r))
        else:
            outputs.append(("arg", position[r]) if r in position else returned_by[r])
    return Cut(tuple(stages), tuple(outputs))


def _refused(
    meta: GraphMeta,
    members: list[fx.Node],
    stage_of: dict[fx.Node, str],
    name: str,
    stage_compiled: dict[str, bool],
    recompute: set[fx.Node],
) -> str | None:
    """Why a compiled segment cannot take what earlier segments hand it (Note [Segments]), or None. Adds to
    ``recompute`` the nodes of earlier compiled segments their backward must recompute rather than save."""
    order, names = meta.order, list(dict.fromkeys(stage_of.values()))
    earlier = [n for n in meta.nodes if n in stage_of and names.index(stage_of[n]) < names.index(name)]
    inside = set(members)
    handed = [n for n in earlier if any(u in inside for u in n.users)]
    grad_roots = {meta.root.get(m, m) for m in meta.requires_grad}  # storages with a value requiring grad
    for n in handed:  # a view of a storage nothing requiring grad has no grad_fn to raise (s1829_602)
        if (
            restricted_view(meta, n)
            and meta.root.get(n, n) in grad_roots
            and any(
                meta.root.get(m) is meta.root.get(n) and order[m] > taken_at(n, order)
                for m in earlier
                if _writes(m) and m not in meta.no_grad  # a write under no_grad does not rebase the view
            )
        ):
            readers = [u for u in n.users if u in inside]
            reason = f"{name} reads {n.name}, a restricted view whose base is written after it was taken"
            return RunEagerlyThrough(reason, max(readers, key=order.__getitem__))  # its lazy error, if any: eager's
        call = n.args[0] if n.target is operator.getitem else n
        if (
            stage_compiled[name]
            and graph_ops.runs_eagerly(call)
            and (p := symbolic_input_alias(meta, n.meta.get("val"))) is not None
            and any(
                order[m] > order[n] and meta.root.get(w) is meta.root.get(p, p)
                for m in meta.mutations
                for w in graph_ops.written_args(m)
            )
        ):  # s1812_2373 under dynamic shapes: the segment would miss the alias and reorder the write
            return (
                f"{name} reads {n.name}, a custom Function's returned input {p.name} of symbolic sizes, written later"
            )
    earlier_set = set(earlier)
    handed_all = [n for n in earlier if any(u not in earlier_set for u in n.users)]
    handed_roots = {meta.root.get(n, n) for n in handed_all}
    restricted_roots = {meta.root.get(n, n) for n in handed_all if restricted_view(meta, n)}
    compiled_before = {n for n in earlier if stage_compiled[stage_of[n]]}
    for n in members:
        for w in [w for w in graph_ops.written_args(n) if meta.root.get(w, w) in handed_roots]:
            root = meta.root.get(w, w)
            if meta.grad_enabled and root in restricted_roots and root in grad_roots:  # grad off: nothing reads it
                reason = f"{n.name} writes {w.name}, whose base an earlier segment handed over as a restricted view"
                return RunEagerlyThrough(reason, n)
            call = root.args[0] if root.target is operator.getitem else root  # s1811_1240: Dynamo's tuple's getitem
            functions_view = graph_ops.runs_eagerly(call) and not graph_ops.written_args(call)
            if n in meta.no_grad and functions_view and root in grad_roots:  # s1701_803: its grad_fn raises
                reason = f"{n.name} writes {w.name} under no_grad, a custom Function's view an earlier call handed over"
                return RunEagerlyThrough(reason, n)
            if (
                hidden_from_autograd(meta, n, w)
                and eager_requires_grad(meta, root)
                and not only_hidden_writes(meta, root, members)
            ):
                return RunEagerlyThrough(
                    f"{n.name} writes {w.name} hidden from autograd, handed over and requiring grad", n
                )
            if (saver := compiled_saver(meta, root, compiled_before, recompute)) is not None:
                return f"{n.name} writes {w.name}, whose {saver} of an earlier compiled segment may save"
    return None


def _example(
    meta: GraphMeta,
    plan: Cut,
    source: Source,
    example_inputs: Sequence[Any],
    stage: Stage | None = None,
    aliased: bool = False,
) -> Any:
    """A compiled segment's example input: the program's own (a non-leaf requiring grad where an earlier segment's
    write recorded by autograd made it require grad: ``x.t().mul_(w)`` run in eager), or the traced value of an
    earlier segment's result (a program input's alias as a view of its example), requiring grad where eager's does."""
    kind, index = source
    if kind == "arg":
        value = example_inputs[index]
        if stage is not None and index in stage.grad_args and not value.requires_grad:
            return value.detach().requires_grad_(True).view_as(value)
        return value
    node = next(s for s in plan.stages if s.name == kind).nodes[index]
    value = node.meta["val"].detach()  # detach keeps the storage
    call = node.args[0] if node.target is operator.getitem else node
    traced = value
    if graph_ops.runs_eagerly(call) is not None or aliased:  # a Function's returned input (s1812_2373), or a
        value = as_input_alias(meta, value, example_inputs)  # value another source aliases (s1819_357)
    if eager_requires_grad(meta, node) and (value.is_floating_point() or value.is_complex()):
        # A non-leaf, as eager's value is: AOTAutograd hides a write to a leaf input from autograd (detach().copy_),
        # a wrong gradient on eager's non-leaf (test_aotdispatch's test_input_data_and_metadata_mutation).
        value.requires_grad_(True)
        hidden = only_hidden_writes(meta, meta.root.get(node, node), stage.members if stage is not None else None)
        value = value if hidden else value.view_as(value)
    # A real alias Dynamo never saw: static sizes, or its fresh symbols break Dynamo's guards (s1817_358).
    return value if value is traced or isinstance(value, ti.FakeTensor) else ti.fakified_with_static_sizes(value)


def _checked(meta: GraphMeta, plan: Cut, stage: Stage, run: Callable[..., Any]) -> Callable[..., Any]:
    handed = [k for k, (kind, _) in enumerate(stage.sources) if kind != "arg"]
    expected = tuple(_example(meta, plan, stage.sources[k], ()).requires_grad for k in handed)
    return checking_grad_flags(run, stage.graph.forward, stage.name, handed, expected)


def _writes(n: fx.Node) -> bool:
    return bool(graph_ops.written_args(n))
