"""Stage 2b: the fallback rules, each a predicate over the graph's record (graph_meta.py) and the epilogue the
selection chose (analysis.py). Each returns the ``Fallback`` that stops the replay, or None.

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
  names the node that saved the tensor, which the compiled backward's cannot. Where no other compiled op saves a
  value of that storage, it is tagged for recomputation instead and the core's watch of the result raises eager's
  error, message included (``output_rules.results_to_watch``; Note [Eager's version error]).

Note [A view taken under no_grad keeps its base's requires_grad]
Eager answers ``requires_grad`` of a view from its base: ``with torch.no_grad(): v = x.expand(...)`` gives a
``v`` that requires grad when ``x`` does, with no ``grad_fn`` and no gradient edge (CreationMeta NO_GRAD_MODE;
a view of ``v`` inherits both). An op run on ``v`` with grad mode on therefore returns a result that requires
grad and sends no gradient anywhere; an op that returns its input under no_grad (``dropout`` with p=0,
``contiguous`` of a contiguous tensor: Note [Ops that return their input]) is ``x`` itself, so gradients even
flow through it. The compiled core computes the no_grad region below autograd: its results neither require
grad nor carry one. Where eager's answer differs (the result would not require grad, or gradients would flow
through an identity), the program is cut after the value: the next segment gets eager's own (fuzzer s1822_45).
A graph that ends at a graph break and returns a NO_GRAD_MODE view falls back too: when the code Dynamo runs
between the graphs writes the view's base in place (``a.unsqueeze_(2)`` is such a break), eager forbids reading
the view's ``grad_fn``, and Dynamo reads ``is_leaf`` when it wraps the view as an input of the next graph
(``fake_tensor.from_real_tensor``), so it would crash where eager runs; stock returns a view autograd allows.
With grad mode off (``no_grad``, ``inference_mode`` calls) stock's views, regenerated after its writes, are
NO_GRAD_MODE (INFERENCE_MODE) too: only the graph's own later write is a reason then (s1826_109, s1826_2399).
The graph Dynamo resumes with falls back too when it returns a NO_GRAD_MODE view of one of its inputs: that input
may be the fallen-back graph's output, stock's view, which autograd lets the caller write in place where eager's
would not; eager's no_grad view of it then refuses its ``grad_fn``, stock's does not (fuzzer s31_447).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
from torch import fx

from . import graph_ops, output_rules
from .fallbacks import Fallback, FallbackKind
from .graph_break_rules import may_be_written_at_break
from .graph_meta import GraphMeta, grad_mode_before, is_any_view, taken_at


def call_to_run_eagerly(meta: GraphMeta) -> Fallback | None:
    """A custom autograd.Function (or checkpointed region) whose forward returns an input or a view of one: eager
    returns a view of the input with the Function's own backward, which no compiled code reproduces. The program
    is cut around the call, which runs in eager (Note [Segments] in segments.py). A call nothing observes (no
    output, write or random draw reads its result) is left in the core, where AOTAutograd drops it."""
    live = _observed(meta) if any(graph_ops.runs_eagerly(n) for n in meta.nodes) else set()
    for n in (n for n in meta.nodes if n in live or graph_ops.written_args(n)):
        if (what := graph_ops.runs_eagerly(n)) is not None and graph_ops.is_metadata_mutation(n):
            return _metadata_mutation_to_run_eagerly(n, what, grad_mode_before(meta, n) != meta.grad_enabled)
        if what is not None and not graph_ops.is_opaque_call(n):  # function_rules.py, _mark_overlapping_writes
            return Fallback(FallbackKind.UNFAITHFUL_TRACE_IN_FUNCTION, what, cut_after=n, run_eagerly=True)
        if what is not None and graph_ops.written_args(n):  # ctx.mark_dirty: written in place and returned
            return Fallback(
                FallbackKind.AUTOGRAD_FUNCTION_IN_GRAPH,
                f"{what} marks an input dirty (an in-place write inside an op the core keeps opaque)",
                cut_after=n,
                run_eagerly=True,
            )
        if what is not None:
            return Fallback(
                FallbackKind.AUTOGRAD_FUNCTION_RETURNS_AN_INPUT,
                f"{what} returns an input (eager returns a view of it, with its own backward; AOTAutograd would "
                "regenerate it from the input around that backward)",
                cut_after=n,
                run_eagerly=True,
            )
    return None


def input_write_its_backward_reads(meta: GraphMeta) -> Fallback | None:
    """Note [A write to an input its own backward reads]
    An in-place op whose backward reads the old value of the tensor it writes (``x.mul_(w)`` with ``w`` requiring
    grad, ``x.sin_()``, ``x.div_(w)``), recorded by autograd, on a graph input or a view of one: eager's node saves
    a copy of that old value (autograd's ``original_self``); AOTAutograd's compiled forward saves the input itself
    and then applies the write to it after the compiled region, so its backward finds the saved input one version
    on and raises where eager's runs. Stock raises so on ``f(x, w): x.mul_(w); return x * 2`` with ``x`` a
    non-leaf (torch 2.13 and 2.14), and the prototype met it in every segment handed such a value (fuzzer
    s1701_2920). The write runs in eager between two compiled segments (Note [Segments]); where the cut is
    refused the program falls back to stock, and its error. Ops whose backward reads only their result (``exp_``,
    ``relu_``) or nothing of the target (``add_``, ``mul_`` by a number) save no input and are compiled."""
    for n in meta.nodes:
        target = graph_ops.mutated_input(n)
        if target is None or n not in meta.recorded or not graph_ops.is_data_mutation(n) or graph_ops.is_opaque_call(n):
            continue
        root = meta.root.get(target, target)
        reads = graph_ops.saved_by_backward(n)  # None: unknown, so it may read it
        if root.op == "placeholder" and (reads is None or target in reads[0]):
            return Fallback(
                FallbackKind.INPUT_WRITE_ITS_BACKWARD_READS,
                f"{n.name} writes graph input {root.name}, recorded by autograd, and its backward reads the value it "
                "overwrites: AOTAutograd would save the input and write it after the compiled region",
                cut_after=n,
                run_eagerly=True,
            )
    return None


def _observed(meta: GraphMeta) -> set[fx.Node]:
    """The nodes whose values reach the outputs, a write or an ordered effect (a random draw)."""
    effects = (n for n in meta.nodes if graph_ops.written_args(n) or graph_ops.has_ordered_effect(n))
    return graph_ops.reaching([meta.output, *effects])


def _metadata_mutation_to_run_eagerly(n: fx.Node, what: str, in_a_region: bool) -> Fallback:
    """compile_function: a metadata mutation of an input marked to run in eager (function_rules.py,
    ``mark_calls_to_run_eagerly``); the reason where the cut around it is refused."""
    target = graph_ops.mutated_input(n)
    while target is not None and graph_ops.mutated_input(target) is not None:  # a chain of in-place calls
        target = graph_ops.mutated_input(target)
    if target is not None and target.op == "placeholder":
        return Fallback(
            FallbackKind.INPUT_METADATA_MUTATION,
            f"an input's own metadata mutation ({what}): Dynamo breaks the graph there, and AOTAutograd would apply it "
            "after the compiled region in one step (or not at all), not with eager's version bumps",
            cut_after=n,
            run_eagerly=True,
            eagerly_through=n if in_a_region else None,  # a no_grad set_: the whole region runs in eager
        )
    return Fallback(
        FallbackKind.INPUT_METADATA_MUTATION_IN_FUNCTION,
        f"a metadata mutation of an input ({what}) inside the function",
        cut_after=n,
        run_eagerly=True,
    )


def replay_order(meta: GraphMeta, epilogue: set[fx.Node], recomputable: Callable[[fx.Node], bool]) -> Fallback | None:
    """Replaying E after the whole core must not change what any core node sees.

    A core node that reads a base after an E data mutation of it needs the mutated value: the core recomputes
    it out of place when it can, and only a value derived from that recomputation (not an alias taken before
    the mutation) sees it.
    """
    nodes, order, root = meta.nodes, meta.order, meta.root
    mutations: dict[fx.Node, list[fx.Node]] = {}
    for n in nodes:
        if n in epilogue and graph_ops.is_data_mutation(n):
            mutations.setdefault(root[n], []).append(n)
    for n in nodes:
        if n in epilogue or n.op == "output" or _like_factory(n):  # it reads no element a data mutation changes
            continue
        for i in n.all_input_nodes:
            before = [m for m in mutations.get(root.get(i, i), ()) if order[m] < order[n]]
            if not before:
                continue
            if not all(recomputable(m) for m in before):
                return Fallback(
                    FallbackKind.READ_AFTER_UNRECOMPUTABLE_MUTATION,
                    f"{n.name} reads {i.name} after {before[0].name} mutated its base (through a view, or under "
                    "no_grad), and that mutation must be replayed in eager",
                    cut_after=before[-1],
                )
            if taken_at(i, order) < order[before[-1]]:  # through views taken earlier too (found by the fuzzer)
                return Fallback(
                    FallbackKind.READ_OF_ALIAS_TAKEN_BEFORE_MUTATION,
                    f"{n.name} reads {i.name}, an alias taken before {before[-1].name} mutated its base",
                    cut_after=before[-1],
                )
    # The converse: an E write must not run after a later core write of the base it copies values from
    # (``t0.copy_(a); a.mul_(2)`` returned twice a: fuzzer s43_876), nor of the base it writes (``a.mul_(2)``
    # replayed, then the core's ``a.detach().bernoulli_()``: the core wrote its own out-of-place copy of ``a`` and
    # the replayed ``mul_`` doubled the old values, a silent wrong value; fuzzer s1003_586).
    core_writes = [m for m in nodes if m not in epilogue and graph_ops.is_data_mutation(m)]
    for n in nodes:
        if n not in epilogue or not graph_ops.is_data_mutation(n):
            continue
        for i in n.all_input_nodes:
            later = [m for m in core_writes if root.get(m) is root.get(i, i) and order[m] > order[n]]
            if later:
                what = "writes" if i is graph_ops.mutated_input(n) else "reads"
                return Fallback(
                    FallbackKind.REPLAYED_COPY_BEFORE_CORE_WRITE,
                    f"{n.name} {what} {i.name}, whose base {later[0].name} of the compiled region writes afterwards",
                    cut_after=n,
                )
    return None


def core_reads_a_replayed_mutation(n: fx.Node, mutation: fx.Node) -> Fallback:
    return Fallback(
        FallbackKind.CORE_READS_REPLAYED_MUTATION,
        f"the compiled region reads {n.name}, produced by a mutation replayed in eager",
        cut_after=mutation,
    )


def unreplayable_mutation(meta: GraphMeta, epilogue: set[fx.Node], duplicated: set[fx.Node]) -> Fallback | None:
    """See Note [Mutations the epilogue must not replay]."""
    last_core_op = max(
        (
            meta.order[n]
            for n in meta.nodes
            if n.op == "call_function"
            and (n not in epilogue or n in duplicated)
            and not graph_ops.is_grad_mode_change(n)  # leaving a ``with torch.no_grad()`` computes nothing
        ),
        default=-1,
    )
    for m in meta.mutations:
        if m not in epilogue:
            continue
        if graph_ops.is_random(m) and (m in duplicated or meta.order[m] < last_core_op):
            # Replayed after every op of the core that follows it in the program, or recomputed by the core.
            return Fallback(
                FallbackKind.RANDOM_MUTATION_AFTER_VIEWS,
                f"{m.name} ({graph_ops.op_name(m)}) draws random numbers after a view is taken; replayed after the "
                "compiled region it would draw again, in another order",
                cut_after=m,
            )
        base = meta.root[m]  # a metadata mutation bumps the version counter too
        reader = may_save(meta, base, epilogue, duplicated)
        core = {n for n in meta.nodes if n not in epilogue or n in duplicated}
        if reader is not None and output_rules.unsaved_storage(meta, base, core) is not None:
            reader = None  # the core recomputes it instead: Note [Bases the compiled backward must not save]
        # A reader after the write is compiled after it once the program is cut there (Note [Segments]).
        cut_after = m if reader is not None and meta.order[reader] > meta.order[m] else None
        # sigmoid, exp...: the backward reads the very tensor the epilogue writes (unless results_to_watch tags it)
        saves_it = reader is None and output_rules.saves_its_result_and_is_read_after(meta, m, base, epilogue)
        if saves_it and output_rules.watched_result_family(meta, base, core) is None:
            reader = base
        if reader is not None:
            what = "graph input" if base.op == "placeholder" else "intermediate"
            return Fallback(
                FallbackKind.WRITE_TO_A_BASE_THE_CORE_MAY_SAVE,
                f"{m.name} writes to {what} {base.name} after the views are taken, and {reader.name} "
                f"({graph_ops.op_name(reader)}) of the compiled region may save it, or a value computed from "
                "it, for backward",
                cut_after=cut_after,
            )
    return None


def may_save(meta: GraphMeta, base: fx.Node, epilogue: set[fx.Node], duplicated: set[fx.Node]) -> fx.Node | None:
    """The first differentiable core op computing from ``base`` whose backward may read values (not one nothing
    observes, ``u = a.sin()`` left unused: no backward reaches it, AOTAutograd drops it; s1826_1203). The partitioner
    may save ``base`` for any value the backward needs that is computed from it. Ops whose backward reads no input
    (``add``, ``mul`` by a number, ``sum``, views...) need none: everything downstream of them is checked in turn."""
    reached, observed = {base}, _observed(meta)
    for n in meta.nodes:
        skipped = (n in epilogue and n not in duplicated) or n.op != "call_function" or n not in observed
        if skipped or not any(i in reached or meta.root.get(i) is base for i in n.all_input_nodes):
            continue
        reached.add(n)
        if n in meta.recorded and not (
            is_any_view(n)
            or n.target is operator.getitem  # unpacking a tuple result: no autograd node of its own
            or graph_ops.is_metadata_mutation(n)  # a view, in place
            or graph_ops.backward_reads_no_input(n)
        ):
            return n
    return None


def no_grad_view_read_with_grad(meta: GraphMeta, epilogue: set[fx.Node]) -> Fallback | None:
    """Note [A view taken under no_grad keeps its base's requires_grad]."""
    no_grad_views: set[fx.Node] = set()  # CreationMeta NO_GRAD_MODE, base requires grad
    identities: set[fx.Node] = set()  # the input itself, returned under no_grad
    eager_requires_grad = set(meta.requires_grad)
    viewed: dict[fx.Node, fx.Node] = {}  # a view -> the value its chain of views starts from
    grad = meta.grad_enabled
    for n in meta.nodes:
        if graph_ops.is_grad_mode_change(n):
            grad = bool(n.args[0])
            continue
        if n.op != "call_function":
            continue
        is_view = is_any_view(n)
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
        if not read or _never_requires_grad(n):
            continue
        eager_requires_grad.add(n)
        if n not in meta.requires_grad or any(i in identities for i in read):
            return Fallback(
                FallbackKind.NO_GRAD_VIEW_READ_WITH_GRAD,
                f"{n.name} ({graph_ops.op_name(n)}) reads {read[0].name}, taken under no_grad from a tensor that "
                "requires grad: eager's result takes requires_grad (from an op that returns its input, gradients "
                "too) from that tensor, the compiled region's would not (Note [A view taken under no_grad keeps "
                "its base's requires_grad])",
                cut_after=read[0],  # Note [Segments]
            )
    # Where stock's compile failed, all outputs are eager's views: Note [Stock's views across a graph break]
    for k, n in enumerate([] if meta.graph_breaks.eager_views_cross else meta.outputs):
        if n not in no_grad_views and not (n in identities and _may_be_a_new_view(n)):
            continue
        if meta.graph_breaks.output_crosses(k) and may_be_written_at_break(meta, n, meta.grad_enabled):
            return Fallback(  # Note [What runs between two graphs] in _torch_internals/dynamo_break.py
                FallbackKind.NO_GRAD_VIEW_AT_GRAPH_BREAK,
                f"output {k} ({n.name}) is a view taken under no_grad from a tensor that requires grad, and "
                "the graph ends at a graph break: Dynamo would crash wrapping it for the next graph if its "
                "base is written in place in between (Note [A view taken under no_grad keeps its base's "
                "requires_grad])",
            )
        if (
            (source := viewed.get(n)) is not None
            and source.op == "placeholder"
            and meta.graph_breaks.input_crosses(i := meta.placeholders.index(source))
            and i not in meta.graph_breaks.checked_inputs  # Note [Stock's views across a graph break]
        ):
            return Fallback(
                FallbackKind.NO_GRAD_VIEW_OF_INPUT_AFTER_GRAPH_BREAK,
                f"output {k} ({n.name}) is a view taken under no_grad of input {source.name}, which requires "
                "grad, in a graph Dynamo resumed after a graph break: where the graph before fell back, that "
                "input is stock's view, which the caller may write in place, and eager's view of it would then "
                "refuse its grad_fn (Note [A view taken under no_grad keeps its base's requires_grad])",
            )
    return None


def _never_requires_grad(n: fx.Node) -> bool:
    """Eager's result of ``n`` requires no grad whatever it reads: an integer or bool tensor, or a ``*_like``
    factory (``empty_like(v)`` of a no_grad view: fuzzer s1817_2120), whose only tensor argument gives its layout."""
    value = n.meta.get("val")
    return _like_factory(n) or (isinstance(value, torch.Tensor) and not value.is_floating_point() | value.is_complex())


def _may_be_a_new_view(n: fx.Node) -> bool:
    """A new view in eager, NO_GRAD_MODE under no_grad (``narrow`` of it all: s1820_651); not ``detach`` nor an op
    returning its input itself (s1821_716)."""
    return graph_ops.schema_name(n) != "detach" and not graph_ops.is_input_returned_by_a_fresh_op(n)


def _like_factory(n: fx.Node) -> bool:
    """``empty_like``, ``zeros_like``, ``rand_like``...: it reads its argument's layout, no element of it."""
    return (graph_ops.schema_name(n) or "").endswith("_like") and isinstance(n.meta.get("val"), torch.Tensor)


# View calls whose autograd view info always carries a view_fn (torch's codegen: VIEW_FUNCTIONS_WITH_METADATA_CHANGE).
_VIEW_FN_VIEWS = {"view_as_real", "view_as_complex", "_conj", "_neg_view"}


def view_fn_write_under_compiled_autograd(meta: GraphMeta, epilogue: set[fx.Node]) -> Fallback | None:
    """Under compiled autograd, a replayed write through a view chain that holds a view_fn view (``view_as_real``,
    ``conj``...): eager's ``CopySlices`` then replays the chain through its view_fn, which torch 2.13's compiled
    autograd rejects ("view_fn not supported by compiled autograd"). Stock's graph has no such node and runs;
    Dynamo with ``backend="eager"`` fails the same way (test_autograd.py's test_autograd_inplace_views_cross_dtype
    run dynamo-wrapped)."""
    if not meta.compiled_autograd:
        return None
    for m in epilogue:
        if not graph_ops.is_data_mutation(m):
            continue
        target = graph_ops.mutated_input(m)
        while target is not None and (is_any_view(target) or graph_ops.is_metadata_mutation(target)):
            if graph_ops.schema_name(target) in _VIEW_FN_VIEWS:
                return Fallback(
                    FallbackKind.VIEW_FN_WRITE_UNDER_COMPILED_AUTOGRAD,
                    f"{m.name} writes through {target.name} ({graph_ops.op_name(target)}), whose eager autograd "
                    "node replays views through a view_fn, which compiled autograd (on) rejects",
                )
            source = target.args[0]
            target = source if isinstance(source, fx.Node) else None
    return None
