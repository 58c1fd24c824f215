"""The whole pipeline, top-down: capture, select, functionalize, slice, compile the core, build the runtime.

Every entry point (Dynamo backend, experimental flag, compile_function, explain) goes through ``compile_captured``.
A stage that finds the program cannot be replayed faithfully returns a reason; the program then goes to stock
AOTAutograd with the same inner backend, and the reason is logged.

Note [The invariant]
For every program, the prototype (1) replays it faithfully, or (2) falls back to stock, or runs Dynamo's graph
uncompiled, with a logged reason (``strict=True`` raises it instead), or (3) raises eager's error. It is never
silently different from eager where stock is not. What enforces it, in pipeline order:
- capture: constructs that pre-dispatch tracing runs but does not record faithfully (an inference_mode region,
  a custom autograd.Function that marks an input dirty or returns an input) fall back before tracing
  (capture.capture_limitation); a failed trace falls back;
- analysis: a plan whose replay would change what the compiled region sees or saves falls back (Notes [Which
  nodes the epilogue replays] and [Mutations the epilogue must not replay]); so does a plan that would not
  reproduce the trace's alias structure: every output that the trace shows aliasing an input or another output
  must come from a replayed view call (the plan check in analysis.py);
- compile: an error compiling the core (which is not the user's program: it returns bases the user only viewed)
  falls back, so stock decides whether the program compiles;
- runtime: the epilogue replays eager's own calls, so eager's errors are raised as eager raises them, and it
  restores the caller's grad mode if one of them raises; version watches raise eager's version error where a
  compiled backward cannot (version_watches.py). The fuzzer and PyTorch's suites check it (design/04).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from . import dynamo_slice, graph_ops, runtime, stock_views
from .analysis import select_epilogue_from
from .capture import (
    UnsupportedCapture,
    capture_limitation,
    inlined_autograd_function,
    may_return_views_of,
    writes_an_input_its_backward_reads,
    written_inputs,
)
from .capture_cache import capture_graph_module_once
from .fallbacks import Fallback, FallbackKind
from .functionalize import functionalize_preserving_views
from .graph_meta import NO_GRAPH_BREAKS, GraphBreaks, GraphMeta, dynamo_graph_breaks, graph_meta
from .inner_backend import (
    InnerBackend,
    Laps,
    cpu_seconds,
    fall_back_to_stock,
    first_line,
    inner_or_uncompiled,
    input_alias_groups,
    internal_error,
    is_backward_version_error,
    no_fall_back,
    on_restricted_view_written,
    resolve_inner,
    stock_for,
    uncompiled,
)
from .labels import graph_label
from .outcomes import FALLBACKS, GRAPHS, outcome  # noqa: F401 (FALLBACKS: re-exported)
from .program import MAX_CUT_DEPTH, CompiledProgram, StrictModeError, unset_run
from .runtime import build_runtime, uncompiled_when_a_restricted_view_is_written
from .saved_value_rules import writes_to_saved_values
from .segments import compile_in_segments
from .slicing import slice_graph
from .version_watches import fallback_under_compiled_autograd, watching_saved_results

log = logging.getLogger("predispatch_views")


def compile_captured(
    pre_dispatch: fx.GraphModule,
    example_inputs: Sequence[Any],
    inner: InnerBackend,
    *,
    fallback_graph: fx.GraphModule | None = None,
    strict: bool = False,
    compile_core: bool = True,
    stock_fallback: bool = True,
    graph_breaks: GraphBreaks = NO_GRAPH_BREAKS,
    cuts_left: int | None = None,
    cut_around_saved_writes: bool = False,
    later_segment: bool = False,
) -> CompiledProgram:
    """Compile a captured pre-dispatch graph. ``fallback_graph`` is what stock gets (default: the capture).
    ``cuts_left``: how many times more a half may be cut in two (default MAX_CUT_DEPTH; Note [Segments] in
    segments.py). ``cut_around_saved_writes``, ``later_segment``: Note [A write to a value a backward saved].
    ``stock_fallback=False``: a program that cannot be replayed comes back with its ``fallback_reason`` and no
    ``run``, neither compiled by stock nor logged (compile_function runs such a function eagerly and logs that).
    """
    inner_fn = resolve_inner(inner)
    cuts_left = MAX_CUT_DEPTH if cuts_left is None else cuts_left
    result = CompiledProgram(run=unset_run, pre_dispatch=pre_dispatch)
    fallback: Fallback | None = None
    grad_enabled = torch.is_grad_enabled()
    requires_grad = [isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs]
    alias_groups = input_alias_groups(example_inputs)
    meta: GraphMeta | None = None
    lap = Laps(result.stage_seconds)
    try:
        meta = graph_meta(
            pre_dispatch,
            grad_enabled=grad_enabled,
            input_alias_groups=alias_groups,
            input_requires_grad=requires_grad,
            input_restricted=[runtime.is_restricted_view_requiring_grad(t) for t in example_inputs],
            graph_breaks=graph_breaks,
            cut_around_saved_writes=cut_around_saved_writes,
            later_segment=later_segment,
        )
        result.restricted_outputs = stock_views.eager_restricted_outputs(meta)
        selection = select_epilogue_from(meta)
        lap("select")
        if isinstance(selection, Fallback):
            fallback = selection
        else:
            result.selection = selection
            functionalized = functionalize_preserving_views(pre_dispatch, selection)
            result.functionalized = functionalized
            lap("functionalize")
            # Parts cost a compiled function each and matter only to a backward (Note [Independent parts of the
            # core] in slicing.py): without one, the core stays whole.
            sliced_for = (alias_groups, requires_grad) if grad_enabled and any(requires_grad) else (None, None)
            result.sliced = slice_graph(functionalized.executable, *sliced_for)
            lap("slice")
    except ti.DYNAMO_RESTARTS:  # Dynamo's request to trace again: Note [Dynamo's restarts]
        raise
    except Exception as e:  # an engine limitation must never break a program stock compiles
        fallback = internal_error(e)
    finally:  # a stage that raised while running a graph's no_grad region must not leave grad mode off
        ti.SET_GRAD_ENABLED(grad_enabled)
    eager_only: str | None = None  # Note [A graph whose every computing op runs in eager] in inner_backend.py
    if fallback is not None and fallback.cut_after is not None and meta is not None and cuts_left > 0:
        at = fallback.cut_after

        def compile_half(
            graph: fx.GraphModule, examples: list[Any], breaks: GraphBreaks, first: bool
        ) -> CompiledProgram:
            # The first segment reads only the program's inputs: no earlier segment wrote them (Note [A write to a
            # value a backward saved] may cut it as it cuts the program); any later one may read their writes.
            return compile_captured(
                graph, examples, inner, compile_core=compile_core, stock_fallback=False, graph_breaks=breaks,
                cuts_left=cuts_left - 1, later_segment=later_segment or not first,
            )  # fmt: skip

        try:  # Note [Segments] in segments.py: each half with its own core and epilogue, or the fallback stands
            eager, through = fallback.run_eagerly, fallback.eagerly_through
            segmented = compile_in_segments(meta, at, example_inputs, compile_half, run_eagerly=eager, through=through)
        except ti.DYNAMO_RESTARTS:  # Dynamo's request to trace again: Note [Dynamo's restarts]
            raise
        except Exception as e:
            log.debug("not cut after %s: %s: %s", at.name, type(e).__name__, e)
            segmented = None
        finally:
            ti.SET_GRAD_ENABLED(grad_enabled)
        if isinstance(segmented, str):
            eager_only = f"{fallback.reason}; cut around {at.name}, {segmented}"
        elif segmented is not None:
            result.segments, result.run = segmented
            span = f"{at.name} ({graph_ops.op_name(at)})" + (f" through {through.name}" if through is not None else "")
            result.notes.append(f"cut {'around' if eager else 'after'} {span}, where {fallback.reason}")
            return result

    def again(**kwargs: Any) -> CompiledProgram | None:  # Note [A write to a value a backward saved]
        if cuts_left <= 0 or meta is None or not writes_to_saved_values(meta):
            return None
        return compile_captured(
            pre_dispatch, example_inputs, inner, fallback_graph=fallback_graph, compile_core=compile_core,
            graph_breaks=graph_breaks, cuts_left=cuts_left, cut_around_saved_writes=True,
            later_segment=later_segment, **kwargs,
        )  # fmt: skip

    if fallback is not None and (retried := again(stock_fallback=False)) is not None:
        if retried.fallback is None:
            return retried
        if retried.fallback.kind is FallbackKind.EVERY_OP_RUNS_IN_EAGER:
            eager_only = eager_only or f"{fallback.reason}; {retried.fallback.reason}"
    stock_graph = fallback_graph or pre_dispatch
    if eager_only is not None and compile_core:
        if not stock_fallback:
            return no_fall_back(result, Fallback(FallbackKind.EVERY_OP_RUNS_IN_EAGER, eager_only), strict)
        return uncompiled(result, eager_only, stock_graph, strict)

    replay = functools.partial(compile_captured, pre_dispatch, example_inputs, inner, fallback_graph=stock_graph,
                               strict=strict, stock_fallback=False)  # fmt: skip
    checked = fallback is not None and stock_views.a_checked_replay_may_do(fallback, graph_breaks)
    if checked and stock_fallback and compile_core:
        assert fallback is not None
        both = stock_views.replayed_unless_stock_views(
            len(example_inputs), graph_breaks, fallback, graph_label(stock_graph), StrictModeError if strict else None,
            replay, lambda: inner_or_uncompiled(result, stock_graph, example_inputs, inner_fn, strict),
        )  # fmt: skip
        if both is not None:
            return both
    if fallback is not None:  # outside the try: stock's own compile errors are the user's, not ours
        if not stock_fallback:
            return no_fall_back(result, fallback, strict)
        stock = functools.partial(fall_back_to_stock, result, fallback, stock_graph, example_inputs, inner_fn, strict)
        return stock_views.stock_unless_rejected(fallback, graph_breaks, stock, replay)
    if not compile_core:
        result.run = build_runtime(result.sliced, None)
        result.epilogue_source = result.run.source
        return result
    retry = functools.partial(again, strict=strict, stock_fallback=stock_fallback)
    return _compile_core(result, example_inputs, inner_fn, stock_graph, strict, stock_fallback, retry)


def _compile_core(
    result: CompiledProgram,
    example_inputs: Sequence[Any],
    inner_fn: Callable[..., Any],
    fallback_graph: fx.GraphModule,
    strict: bool,
    stock_fallback: bool = True,
    retry: Callable[[], CompiledProgram | None] | None = None,
) -> CompiledProgram:
    """The inner backend on the core, then the runtime; ``retry`` on a backward's version error (Note [A write to a
    value a backward saved]). A core whose version watch compiled autograd would skip goes to stock."""
    assert result.sliced is not None
    lap = Laps(result.stage_seconds)
    cores = None
    fallback = fallback_under_compiled_autograd(result.sliced, example_inputs)
    if fallback is None and not result.sliced.core_is_empty:
        grad_enabled = torch.is_grad_enabled()
        try:  # one compiled function per independent part: Note [Independent parts of the core] in slicing.py
            cores = [inner_fn(p.graph, [example_inputs[i] for i in p.inputs]) for p in result.sliced.parts]
        except ti.DYNAMO_RESTARTS:  # Dynamo's request to trace again: Note [Dynamo's restarts]
            raise
        except Exception as e:
            ti.SET_GRAD_ENABLED(grad_enabled)
            if retry is not None and is_backward_version_error(e) and (retried := retry()) is not None:
                return retried
            # The core is not the user's program: it returns bases the program only viewed (perhaps under
            # no_grad), so AOTAutograd can trace a backward the program never asks for. Stock decides.
            fallback = Fallback(
                FallbackKind.CORE_COMPILE_FAILED, f"compiling the core raised {type(e).__name__}: {first_line(e)}"
            )
    if fallback is not None:
        if not stock_fallback:
            return no_fall_back(result, fallback, strict)
        return fall_back_to_stock(result, fallback, fallback_graph, example_inputs, inner_fn, strict)
    lap("inner compile")
    result.run = build_runtime(result.sliced, cores)
    result.epilogue_source = result.run.source
    lap("runtime")
    return result


def compile_dynamo_graph(
    gm: fx.GraphModule, example_inputs: Sequence[Any], inner: InnerBackend, *, strict: bool = False
) -> CompiledProgram:
    """The backend path: ``gm`` is Dynamo's graph, ``example_inputs`` its inputs (tensors, ints, SymInts...).
    What became of the graph is logged at INFO and kept in GRAPHS."""
    program = _compile_dynamo_graph_guarded(gm, example_inputs, inner, strict=strict)
    what, detail = outcome(program)
    label = graph_label(gm)
    GRAPHS.append((label, what, detail))
    log.info("graph %s: %s%s", label, what, f" ({detail})" if detail else "")
    return program


def _compile_dynamo_graph_guarded(
    gm: fx.GraphModule, example_inputs: Sequence[Any], inner: InnerBackend, *, strict: bool = False
) -> CompiledProgram:
    """Every piece of engine code that runs here, the wrappers' setup included, is under the internal-error guard:
    an engine defect falls back to stock, it never becomes the user's crash (Note [The invariant])."""
    try:
        ti.restore_input_contexts(gm, example_inputs)
        written = written_inputs(gm)
        # The capture's epilogue may replay it as eager's call: Note [A restricted view aliased by a write]
        replay_writes = (
            torch.is_grad_enabled() and runtime.restricted_view_aliasing(example_inputs, written) is not None
        )
    except ti.DYNAMO_RESTARTS:  # Dynamo's request to trace again: Note [Dynamo's restarts]
        raise
    except Exception as e:
        return stock_for(gm, example_inputs, inner, internal_error(e), strict)
    program = _compile_dynamo_graph(gm, example_inputs, inner, strict=strict, replay_writes=replay_writes)
    if not written:
        return program
    try:
        if program.sliced is not None and not (program.fallback or program.segments or program.may_run_stock):
            written = runtime.inputs_the_core_writes(program.sliced, written)  # the epilogue's writes are eager's own
        on_use = on_restricted_view_written(gm, strict)
        program.run = uncompiled_when_a_restricted_view_is_written(program.run, gm, written, example_inputs, on_use)
    except ti.DYNAMO_RESTARTS:  # Dynamo's request to trace again: Note [Dynamo's restarts]
        raise
    except Exception as e:
        return stock_for(gm, example_inputs, inner, internal_error(e), strict)
    return program


def _compile_dynamo_graph(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    inner: InnerBackend,
    *,
    strict: bool = False,
    replay_writes: bool = False,
) -> CompiledProgram:
    try:
        # Compiled autograd's backward graph returns gradients from one boxed list input: no view to replay.
        compiled_autograd = ti.compiling_a_compiled_autograd_graph()
        may_return_views = not compiled_autograd and (may_return_views_of(gm) or writes_an_input_its_backward_reads(gm))
        limitation = capture_limitation(gm) if may_return_views else None
    except ti.DYNAMO_RESTARTS:  # Dynamo's request to trace again: Note [Dynamo's restarts]
        raise
    except Exception as e:
        return stock_for(gm, example_inputs, inner, internal_error(e), strict)
    if not may_return_views and replay_writes and (replayed := _replaying_writes(gm, example_inputs, inner)):
        return replayed
    if not may_return_views:
        # Nothing for an epilogue to replay: the inner backend alone gives the same program, without our trace.
        note = "compiled autograd" if compiled_autograd else "no view outputs"
        program = CompiledProgram(run=unset_run, notes=[note])
        segmented = None if compiled_autograd else lambda: _cut_at_a_saved_write(gm, example_inputs, inner)
        run = inner_or_uncompiled(program, gm, example_inputs, resolve_inner(inner), strict, segmented)
        # Note [Eager's version error]; uncompiled (a fallback), eager's own node saved it and raises its error
        watch = not (compiled_autograd or program.segments or program.fallback)
        program.run = watching_saved_results(gm, run) if watch else run
        return program
    if limitation is not None:
        return stock_for(gm, example_inputs, inner, limitation, strict)
    start = cpu_seconds()
    if dynamo_slice.ENABLED:  # Note [Slicing Dynamo's graph]: no trace beyond stock's where it applies
        try:
            sliced = dynamo_slice.slice_dynamo_graph(
                gm,
                example_inputs,
                differentiable=torch.is_grad_enabled()
                and any(getattr(t, "requires_grad", False) for t in example_inputs),
                at_graph_break=ti.starts_after_graph_break(gm) or ti.ends_at_graph_break(gm),
            )
        except ti.DYNAMO_RESTARTS:  # Dynamo's request to trace again: Note [Dynamo's restarts]
            raise
        except Exception as e:
            return stock_for(gm, example_inputs, inner, internal_error(e), strict)
        if not isinstance(sliced, str):
            program = CompiledProgram(run=unset_run, sliced=sliced, notes=["sliced Dynamo's graph"])
            program.stage_seconds["slice Dynamo's graph"] = cpu_seconds() - start
            return _compile_core(program, example_inputs, resolve_inner(inner), gm, strict)
        log.debug("capturing %s: %s", graph_label(gm), sliced)
    try:
        pre_dispatch = capture_graph_module_once(gm, example_inputs)
        inlined = inlined_autograd_function(gm)
        captured_in = cpu_seconds() - start
    except UnsupportedCapture as e:
        return stock_for(gm, example_inputs, inner, e.fallback, strict)
    except ti.DYNAMO_RESTARTS:  # Dynamo's request to trace again: Note [Dynamo's restarts]
        raise
    except Exception as e:
        if strict:
            raise
        failed = Fallback(FallbackKind.CAPTURE_FAILED, f"pre-dispatch capture failed: {type(e).__name__}: {e}")
        return stock_for(gm, example_inputs, inner, failed, strict)
    if inlined is not None:
        return stock_for(gm, example_inputs, inner, inlined, strict)
    program = compile_captured(
        pre_dispatch,
        example_inputs,
        inner,
        fallback_graph=gm,
        strict=strict,
        graph_breaks=dynamo_graph_breaks(gm),
    )
    program.stage_seconds = {"capture": captured_in, **program.stage_seconds}
    return program


def _cut_at_a_saved_write(gm: fx.GraphModule, example_inputs: Sequence[Any], inner: InnerBackend) -> Any:
    """Note [A write to a value a backward saved]: Dynamo's graph in segments, or None."""
    program = _captured(gm, example_inputs, inner, cut_around_saved_writes=True)
    return program if program.fallback is None and program.segments else None


def _replaying_writes(gm: fx.GraphModule, example_inputs: Sequence[Any], inner: InnerBackend) -> Any:
    """Dynamo's graph that returns no view, captured all the same, for its epilogue to replay its writes of a
    restricted view (Note [A restricted view aliased by a write]); None where that falls back."""
    try:
        if capture_limitation(gm) is None and inlined_autograd_function(gm) is None:
            program = _captured(gm, example_inputs, inner)
            return program if program.fallback is None else None
    except ti.DYNAMO_RESTARTS:  # Dynamo's request to trace again: Note [Dynamo's restarts]
        raise
    except Exception as e:
        log.debug("not replaying the writes of %s: %s", graph_label(gm), e)
    return None


def _captured(gm: fx.GraphModule, example_inputs: Sequence[Any], inner: InnerBackend, **kwargs: Any) -> Any:
    pre_dispatch, breaks = capture_graph_module_once(gm, example_inputs), dynamo_graph_breaks(gm)
    return compile_captured(pre_dispatch, example_inputs, inner, fallback_graph=gm, stock_fallback=False,
                            graph_breaks=breaks, **kwargs)  # fmt: skip
