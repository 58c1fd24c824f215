"""The inner backend: resolving its name, and calling it on a graph stock would compile; CPU time per stage."""

from __future__ import annotations

import logging
import re
import resource
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from . import stock_views
from ._torch_internals.dynamo_traced_code import without_inlined_function_views
from .fallbacks import Fallback, FallbackKind
from .labels import graph_label
from .outcomes import FALLBACKS
from .program import CompiledProgram, StrictModeError, unset_run

log = logging.getLogger("predispatch_views")
InnerBackend = str | Callable[..., Any]


def resolve_inner(inner: InnerBackend) -> Callable[..., Any]:
    """The inner backend's callable, for "inductor", "aot_eager", "eager", another registered name, or a callable.

    A registered name other than inductor compiles keeping the random draws nothing reads (Note [Random draws
    nothing reads]); a callable is the user's own and is called as it is."""
    if callable(inner):
        return inner
    if inner == "inductor":
        return ti.inductor_compile_fx()
    if inner == "eager":
        return lambda gm, example_inputs: gm.forward
    return ti.keeping_random_draws(ti.lookup_backend(inner))


def input_alias_groups(example_inputs: Sequence[Any]) -> list[int]:
    """For each input, the index of the first input that shares its storage (itself if none)."""
    first: dict[ti.StorageWeakRef, int] = {}
    groups = []
    for i, t in enumerate(example_inputs):
        if isinstance(t, torch.Tensor):
            groups.append(first.setdefault(ti.StorageWeakRef(t.untyped_storage()), i))
        else:
            groups.append(i)
    return groups


def inner_or_uncompiled(
    result: Any,  # pipeline.CompiledProgram: its fallback is set here
    graph: fx.GraphModule,
    example_inputs: Sequence[Any],
    inner_fn: Callable[..., Any],
    strict: bool,
    segmented: Callable[[], Any] | None = None,
) -> Callable[..., Any]:
    """Dynamo's graph compiled by the inner backend, or run uncompiled where that raises and eager would not;
    ``segmented`` (a pipeline.CompiledProgram or None) first where the backward trace raised autograd's version
    error (Note [A write to a value a backward saved] in saved_value_rules.py).

    Note [Graphs the inner backend rejects]
    Stock's own compile errors are the user's, except where eager runs the graph:
    - Inputs that share storage. An earlier graph the prototype replayed returns real views, where stock returns
      fresh tensors, so the next graph can receive inputs that share storage, which it never does under stock.
      AOTAutograd's synthetic-base path has bugs there (torch 2.13, dynamic shapes: "Cannot call numel() on
      tensor with symbolic sizes/strides" in compute_overlapping_inputs; fuzzer s62_92).
    - Autograd's version-counter error ("one of the variables needed for gradient computation has been modified
      by an inplace operation"): AOTAutograd traces the backward at compile time and meets, for every program,
      the error eager raises only when a backward reaches that node (``t0 = a.tanh(); t0.uniform_()``, fuzzer
      s1101_80). Eager's forward runs; so does Dynamo's graph uncompiled, and its backward raises eager's error.
    - An op without a derivative ("derivative for aten::copy is not implemented"): eager records a node that raises
      only in backward. Compiled autograd's graph of a replayed write's ``CopySlices`` holds a functional ``copy``,
      which AOTAutograd's joint trace refuses (fuzzer s1809_550, where the ceiling runs the backward).
    - A view's lazy error ("Output 1 of Unbind is a view and its base or another view of its base has been
      modified inplace", the same for a view made under no_grad): AOTAutograd reads every ``grad_fn`` while it
      traces; eager reads one only where a later op or a backward asks for it (fuzzer s1802_116, where the ceiling
      runs the program and stock's compile fails). Uncompiled, the graph raises it exactly where eager does.
    - A random draw nothing reads, which the inner backend keeps as eager draws it (Note [Random draws nothing
      reads]) and AOTAutograd's default partitioner then refuses (Note [A kept draw the partitioner refuses];
      fuzzer s1808_1837). Stock drops the draw and compiles; uncompiled, the generator ends where eager's does.
    Running Dynamo's graph uncompiled is exactly ``backend="eager"``: eager's behaviour, with a logged reason.
    The graph is Dynamo's as stock gets it (Note [An inlined Function returns its input as eager does]), where an
    inlined Function's result is its input itself; the input is then returned as it is (``_inputs_as_they_are``).
    """
    original, stripped = graph, without_inlined_function_views(graph)
    graph, rewritten = stripped, stripped is not graph
    try:
        try:
            compiled = inner_fn(graph, list(example_inputs))
        except ti.DYNAMO_RESTARTS:
            raise
        except Exception:
            if not rewritten:
                raise
            # Stripped, a write of the view's metadata (``t4.unsqueeze_(3)``) became one of the input's, which
            # Dynamo's own trace would have broken at (fuzzer s1820_805): the graph as traced, eager's view.
            graph, rewritten = original, False
            compiled = inner_fn(graph, list(example_inputs))
        return _inputs_as_they_are(compiled, graph) if rewritten else compiled
    except ti.DYNAMO_RESTARTS:  # Dynamo's request to trace again: Note [Dynamo's restarts]
        raise
    except Exception as e:
        groups = input_alias_groups(example_inputs)
        if strict:
            raise
        if len(set(groups)) != len(groups):
            why = "on inputs that share storage (the views an earlier graph returned)"
        elif is_backward_version_error(e):
            if segmented is not None and (program := segmented()) is not None:
                result.segments, result.notes = program.segments, [*result.notes, *program.notes]
                return program.run
            why = "while tracing the backward, an error eager raises only if a backward reaches it"
        elif _NO_DERIVATIVE.search(str(e)):  # eager records a NotImplemented node, which raises in backward
            why = "while tracing the backward, an error eager raises only if a backward reaches it"
        elif _LAZY_VIEW_ERROR in str(e):
            why = "reading the grad_fn of a view whose base was written, an error eager raises only where it is read"
        elif ti.refused_a_kept_draw(e):
            why = "on a random draw nothing reads, kept as eager draws it, which its partitioner refuses"
        else:
            raise
        reason = (
            f"the inner backend raised {type(e).__name__} {why}: the graph runs uncompiled (Note [Graphs the inner "
            f"backend rejects]): {first_line(e)}"
        )
        log.info("%s [in %s]", reason, graph_label(graph))
        FALLBACKS.append((graph_label(graph), reason))
        if result.fallback is None:
            result.fallback = Fallback(FallbackKind.INNER_BACKEND_REJECTED, reason)
        result.runs_uncompiled = True
        return graph.forward


def _record(result: Any, fallback: Fallback, graph: fx.GraphModule, strict: bool, prefix: str = "") -> None:
    """A graph-wide fallback: raised in strict mode, else logged, listed in FALLBACKS and set on ``result``."""
    if strict:
        raise StrictModeError(fallback.reason)
    log.info("%s%s [in %s]", prefix, fallback.reason, graph_label(graph))
    FALLBACKS.append((graph_label(graph), fallback.reason))
    result.fallback = fallback


def on_restricted_view_written(graph: fx.GraphModule, strict: bool) -> Callable[[int], None]:
    """What a call that runs ``graph`` uncompiled for Note [A restricted view aliased by a write] (runtime.py) records:
    the fallback, once per input (raised in strict mode)."""
    logged: set[int] = set()

    def on_use(k: int) -> None:
        fallback = Fallback(
            FallbackKind.RESTRICTED_VIEW_WRITTEN,
            f"input {k} is a view autograd forbids rebasing, and the graph writes an alias of it: the graph "
            "runs uncompiled for such calls (Note [A restricted view aliased by a write])",
        )
        if strict:
            raise StrictModeError(fallback.reason)
        if k not in logged:
            logged.add(k)
            log.info("%s [in %s]", fallback.reason, graph_label(graph))
            FALLBACKS.append((graph_label(graph), fallback.reason))

    return on_use


def fall_back_to_stock(
    result: Any, fallback: Fallback, graph: fx.GraphModule, example_inputs: Sequence[Any],
    inner_fn: Callable[..., Any], strict: bool,
) -> Any:  # fmt: skip
    """``result`` (a pipeline.CompiledProgram) given stock's program of ``graph``, the reason logged."""
    _record(result, fallback, graph, strict, "falling back to stock AOTAutograd: ")
    run = inner_or_uncompiled(result, graph, example_inputs, inner_fn, strict)
    result.run = stock_views.recording_stock_views(run, result.restricted_outputs)
    return result


def no_fall_back(result: Any, fallback: Fallback, strict: bool) -> Any:
    """``result`` with its reason and no ``run`` (a segment's, or compile_function's: its caller decides)."""
    if strict:
        raise StrictModeError(fallback.reason)
    result.fallback = fallback
    return result


def uncompiled(result: Any, cut: str, graph: fx.GraphModule, strict: bool) -> Any:
    """Note [A graph whose every computing op runs in eager]
    A program cut around a run of nodes that must run in eager (Note [Segments] in segments.py: a custom Function
    that marks an input dirty or returns one, the saver of a value a later write overwrites and that write) may
    leave nothing but views to compile: every op that computes is in the run (``t0 = a.tanh(); MarkDirty.apply(t0)``).
    Stock's program is then no faster than eager's and often wrong: it compiles the saver, so its backward trace
    raises the version error at compile time, or it hides the Function's write (fuzzer s1829_7, s1828_1086). Dynamo's
    graph runs uncompiled instead, as Dynamo with ``backend="eager"`` runs it: eager's own calls, views and errors,
    and a logged reason (``result.fallback``: the prototype compiles nothing there). Its outputs are eager's own
    views, so they are not recorded as stock's (Note [Stock's views across a graph break] in stock_views.py)."""
    reason = f"{cut}: every op that computes runs in eager, and the graph runs uncompiled"
    _record(result, Fallback(FallbackKind.EVERY_OP_RUNS_IN_EAGER, reason), graph, strict)
    result.run = graph.forward
    return result


def _inputs_as_they_are(compiled: Callable[..., Any], graph: fx.GraphModule) -> Callable[..., Any]:
    """``compiled``, returning the input object itself where the graph returns an input. Stock's Dynamo never makes
    an inlined Function's result (its input itself) a graph output: the frame reads the input back. Compiled
    from the graph without the rewrite, that output is AOTAutograd's regenerated alias of the input, made anew on
    each call (under inference_mode, an inference-mode view, whose ``grad_fn`` Dynamo's next trace reads after
    the caller wrote it: fuzzer s1701_2557)."""
    placeholders = list(graph.graph.find_nodes(op="placeholder"))
    returned = ti.tree_leaves(graph.graph.output_node().args[0])
    direct = {k: placeholders.index(o) for k, o in enumerate(returned) if o in placeholders}
    if not direct:
        return compiled

    def run(*args: Any) -> Any:
        outs = list(compiled(*args))
        for k, i in direct.items():
            outs[k] = args[i]
        return outs

    return run


def is_backward_version_error(e: BaseException) -> bool:
    return _BACKWARD_ERROR in str(e)


_BACKWARD_ERROR = "one of the variables needed for gradient computation has been modified by an inplace operation"
_NO_DERIVATIVE = re.compile(r"derivative for \S+ is not implemented")
_LAZY_VIEW_ERROR = "its base or another view of its base has been modified inplace"  # handle_view_on_rebase's


def cpu_seconds() -> float:
    """CPU seconds of this process and of its waited-for children (inductor's gcc)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Laps:
    """``lap(stage)`` adds the CPU seconds since the previous lap (or since made) to ``into[stage]``."""

    def __init__(self, into: dict[str, float]) -> None:
        self.into, self.last = into, cpu_seconds()

    def __call__(self, stage: str) -> None:
        now = cpu_seconds()
        self.into[stage] = self.into.get(stage, 0.0) + now - self.last
        self.last = now


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def stock_for(
    gm: fx.GraphModule, example_inputs: Sequence[Any], inner: InnerBackend, fallback: Fallback, strict: bool
) -> CompiledProgram:
    """Dynamo's graph compiled by stock, with the reason logged (raised under strict)."""
    return fall_back_to_stock(
        CompiledProgram(run=unset_run), fallback, gm, example_inputs, resolve_inner(inner), strict
    )


def internal_error(e: BaseException) -> Fallback:
    return Fallback(FallbackKind.INTERNAL_ERROR, f"internal error in the view-replay pipeline: {type(e).__name__}: {e}")
