"""Stage 2c: segments. A program whose epilogue cannot move a mutation after the whole core is cut in two at
that mutation; each half gets its own core and epilogue, and the halves run one after the other.

Note [Segments]
The epilogue runs after the whole core (Note [Which nodes the epilogue replays] in analysis.py). Some
mutations cannot move there: a write through a view that compiled code reads afterwards, a random in-place op
that compiled code reads, a write to a base whose later reader may save it, a replayed copy of values that
compiled code writes afterwards. The rule that finds one (fallback_rules.py) names it as ``cut_after``.
Instead of falling back, ``cut`` splits the pre-dispatch graph right after that node, in program order:
- ``first``: every node up to the cut node; it returns every value of its own that the second half or the
  program's outputs read (the crossing values), so its own epilogue replays the views among them;
- ``second``: every node after the cut; its inputs are the program inputs it reads and the crossing values.
The runtime calls the first half, then the second with the first's real results, as Dynamo calls the graph
after a graph break with the graph before's. Each half is compiled by ``compile_captured``, so each may be cut
again (the pipeline bounds how often), and each is checked by every rule on its own.
What stays the same: the mutation runs in eager (the first half's epilogue) where eager runs it, before every
op that follows it in the program, and those ops read its real result.
A cut is refused (the program falls back as before) where the second half would see something the whole
program did not:
- the cut lies inside a grad-mode region that does not end (each half must end in the grad mode it began in;
  a cut inside one that ends moves to its end);
- a crossing value is not a tensor (a size: the second half would need it as an input of its own);
- the second half reads a restricted view (a multi-output view's output, a view made under no_grad) whose base
  the first half writes with grad mode on after the view was taken: eager reads it only
  where an op asks for its ``grad_fn`` (``detach`` does not), and may raise its lazy error there ("Output 0 of
  Split is a view and its base ... has been modified inplace"); a compiled function asks on every call;
- the second half writes (data or metadata) a value aliasing a crossing value: its inputs would then be
  views it mutates, which AOTAutograd applies with a copy_ after its forward (another ``grad_fn``, and a
  restricted view's lazy error read early: Note [A restricted view aliased by a write] in runtime.py);
- the program's outputs are not a flat tuple.
Each half is one more compiled function per call (AOTAutograd's runtime wrappers, one autograd node):
scripts/core_parts_cost.py measures what a part costs; a segment costs the same.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from . import graph_ops
from .graph_meta import GraphBreaks, GraphMeta, is_any_view, taken_at

log = logging.getLogger("predispatch_views")


def compile_in_segments(
    meta: GraphMeta,
    at: fx.Node,
    example_inputs: Sequence[Any],
    compile_half: Callable[[fx.GraphModule, list[Any], GraphBreaks], Any],
) -> tuple[list[Any], Callable[..., Any]] | None:
    """The program cut after ``at``, each half compiled by ``compile_half`` (the pipeline, one cut fewer), and the
    runtime that calls them; None where it cannot be cut there or a half would fall back."""
    plan = cut(meta, at)
    if isinstance(plan, str):
        log.debug("not cut after %s: %s", at.name, plan)
        return None
    halves = []
    examples, breaks = example_inputs_of(plan, meta, example_inputs), graph_breaks_of(plan, meta.graph_breaks)
    halves_in = zip((plan.first, plan.second), examples, breaks)
    for graph, half_examples, half_breaks in halves_in:
        half = compile_half(graph, half_examples, half_breaks)
        if half.fallback is not None:
            log.debug("not cut after %s: a half falls back: %s", at.name, half.fallback.reason)
            return None
        halves.append(half)
    expected = [t.requires_grad for t in crossing_examples(meta, plan)]

    def on_mismatch() -> None:
        log.warning(
            "predispatch_views: the values crossing the cut after %s require grad other than the compiled code "
            "after it expects; that code runs uncompiled (eager's ops) for this call",
            at.name,
        )

    return halves, segmented_runtime(plan, halves[0].run, halves[1].run, expected, on_mismatch)


@dataclass(frozen=True)
class Cut:
    """A program cut after one node: two graphs and how the runtime wires them."""

    first: fx.GraphModule  # placeholders: the program inputs in first_inputs; returns the crossing values
    second: fx.GraphModule  # placeholders: second_inputs' program inputs, then the crossing values it reads
    first_inputs: tuple[int, ...]  # program inputs, by position
    second_inputs: tuple[int, ...]  # program inputs, by position
    second_crossing: tuple[int, ...]  # crossing values the second half reads, by position in first's outputs
    # Where each program output comes from: ("first", j), ("second", j), ("arg", i) or ("constant", value).
    outputs: tuple[tuple[str, Any], ...]
    crossing: tuple[fx.Node, ...]  # the original nodes of first's outputs (their traced values: example inputs)


def cut(meta: GraphMeta, at: fx.Node) -> Cut | str:
    """Cut the program of ``meta`` right after ``at``; a string says why it cannot be cut there."""
    nodes, order = meta.nodes, meta.order
    output = meta.output
    returned = output.args[0]
    if not isinstance(returned, (tuple, list)) or any(isinstance(r, (tuple, list, dict)) for r in returned):
        return "the program's outputs are not a flat tuple"
    at = _end_of_grad_mode_region(meta, at)
    if at is None:
        return "the cut would lie inside a grad-mode region that does not end"
    first_nodes = [n for n in nodes if n.op != "placeholder" and n is not output and order[n] <= order[at]]
    second_nodes = [n for n in nodes if n.op != "placeholder" and n is not output and order[n] > order[at]]
    if not second_nodes:
        return "nothing follows the cut"
    in_first = set(first_nodes)
    crossing = [n for n in first_nodes if any(u not in in_first for u in n.users)]
    for n in crossing:
        if not isinstance(n.meta.get("val"), torch.Tensor):
            return f"{n.name}, which the code after the cut reads, is not a tensor"
    read_after = [n for n in crossing if any(u not in in_first and u is not output for u in n.users)]
    for n in read_after:
        if _restricted_view(meta, n) and any(
            meta.root.get(m) is meta.root.get(n) and order[m] > taken_at(n, order)
            for m in first_nodes
            if _writes(m) and m not in meta.no_grad  # a write under no_grad does not rebase the view
        ):
            return f"the code after the cut reads {n.name}, a restricted view whose base is written after it was taken"
    crossing_roots = {meta.root.get(n, n) for n in crossing}
    for n in second_nodes:
        for w in graph_ops.written_args(n):
            if meta.root.get(w, w) in crossing_roots:
                return f"{n.name} after the cut writes {w.name}, which aliases a value computed before it"

    placeholders = meta.placeholders
    position = {p: i for i, p in enumerate(placeholders)}
    first_graph, first_env = fx.Graph(), {}
    first_inputs = [i for i, p in enumerate(placeholders) if any(u in in_first for u in p.users)]
    for i in first_inputs:
        first_env[placeholders[i]] = _copy_placeholder(first_graph, placeholders[i])
    for n in first_nodes:
        first_env[n] = first_graph.node_copy(n, first_env.__getitem__)
    first_graph.output(tuple(first_env[n] for n in crossing))

    second_set = set(second_nodes)
    second_graph, second_env = fx.Graph(), {}
    second_inputs = [i for i, p in enumerate(placeholders) if any(u in second_set for u in p.users)]
    for i in second_inputs:
        second_env[placeholders[i]] = _copy_placeholder(second_graph, placeholders[i])
    crossing_index = {n: j for j, n in enumerate(crossing)}
    second_crossing = [j for j, n in enumerate(crossing) if any(u in second_set for u in n.users)]
    for j in second_crossing:
        second_env[crossing[j]] = _copy_placeholder(second_graph, crossing[j])
    for n in second_nodes:
        second_env[n] = second_graph.node_copy(n, second_env.__getitem__)
    second_returned = [r for r in dict.fromkeys(returned) if isinstance(r, fx.Node) and r in second_set]
    second_index = {n: j for j, n in enumerate(second_returned)}
    second_graph.output(tuple(second_env[n] for n in second_returned))

    outputs: list[tuple[str, Any]] = []
    for r in returned:
        if not isinstance(r, fx.Node):
            outputs.append(("constant", r))
        elif r in position:
            outputs.append(("arg", position[r]))
        elif r in crossing_index:
            outputs.append(("first", crossing_index[r]))
        else:
            outputs.append(("second", second_index[r]))
    return Cut(
        first=fx.GraphModule(meta.gm, first_graph),
        second=fx.GraphModule(meta.gm, second_graph),
        first_inputs=tuple(first_inputs),
        second_inputs=tuple(second_inputs),
        second_crossing=tuple(second_crossing),
        outputs=tuple(outputs),
        crossing=tuple(crossing),
    )


def crossing_examples(meta: GraphMeta, plan: Cut) -> list[torch.Tensor]:
    """Example inputs for the second half's crossing placeholders: the traced values, requiring grad where
    eager's do (the capture's values never do). ``detach`` keeps the storage, so aliasing is seen as it is."""
    examples = []
    for j in plan.second_crossing:
        value = plan.crossing[j].meta["val"].detach()
        if crossing_requires_grad(meta, plan.crossing[j]) and (value.is_floating_point() or value.is_complex()):
            value.requires_grad_(True)
        examples.append(value)
    return examples


def crossing_requires_grad(meta: GraphMeta, n: fx.Node) -> bool:
    """Whether eager's value of ``n`` requires grad. An in-place call returns its target, which keeps requiring
    grad when the call runs under no_grad (the record counts the call's result as made under no_grad)."""
    while True:
        if n in meta.requires_grad:
            return True
        target = graph_ops.mutated_input(n)
        if target is None:
            return False
        n = target


def segmented_runtime(
    plan: Cut,
    run_first: Callable[..., Any],
    run_second: Callable[..., Any],
    expected_requires_grad: Sequence[bool],
    on_mismatch: Callable[[], None],
) -> Callable[..., Any]:
    """``run(*args)``: the first half, then the second. The second half was compiled for crossing values that
    require grad as ``expected_requires_grad`` says; a call whose values differ (the record's answer was wrong)
    runs the second half's own eager ops instead (``plan.second``: the program's calls after the cut), after
    ``on_mismatch``."""
    first_inputs, second_inputs, second_crossing = plan.first_inputs, plan.second_inputs, plan.second_crossing
    outputs, run_second_eagerly = plan.outputs, plan.second.forward
    expected = tuple(expected_requires_grad)

    def run(*args: Any) -> tuple[Any, ...]:
        first = run_first(*[args[i] for i in first_inputs])
        crossing = [first[j] for j in second_crossing]
        second_args = [args[i] for i in second_inputs] + crossing
        if tuple(t.requires_grad for t in crossing) == expected:
            second = run_second(*second_args)
        else:
            on_mismatch()
            second = run_second_eagerly(*second_args)
        sources = {"first": first, "second": second, "arg": args}
        return tuple(value if kind == "constant" else sources[kind][value] for kind, value in outputs)

    return run


def _restricted_view(meta: GraphMeta, n: fx.Node) -> bool:
    """A view autograd forbids rebasing: an output of a multi-output view call, or a view made under no_grad (or a
    view of one). Its ``grad_fn`` raises once its base is written; a plain view's is regenerated."""
    while is_any_view(n):
        if graph_ops.is_view_getitem(n) or n in meta.no_grad:
            return True
        source = n.args[0]
        if not isinstance(source, fx.Node):
            return False
        n = source
    return False


def _writes(n: fx.Node) -> bool:
    return bool(graph_ops.written_args(n))


def _copy_placeholder(graph: fx.Graph, n: fx.Node) -> fx.Node:
    p = graph.placeholder(n.name)
    p.meta = dict(n.meta)
    return p


def _end_of_grad_mode_region(meta: GraphMeta, at: fx.Node) -> fx.Node | None:
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


def graph_breaks_of(plan: Cut, breaks: GraphBreaks) -> tuple[GraphBreaks, GraphBreaks]:
    """Where each half meets a graph break: the first half's outputs that are the program's cross the one after
    the program, the second half's inputs that are the program's come from the one before it."""
    returned = {j for kind, j in plan.outputs if kind == "first"}
    first = dataclasses.replace(breaks, outputs_after=frozenset(returned))
    second = dataclasses.replace(breaks, inputs_before=frozenset(range(len(plan.second_inputs))))
    return first, second


def example_inputs_of(plan: Cut, meta: GraphMeta, example_inputs: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """Example inputs of the two halves."""
    first = [example_inputs[i] for i in plan.first_inputs]
    second = [example_inputs[i] for i in plan.second_inputs] + crossing_examples(meta, plan)
    return first, second
