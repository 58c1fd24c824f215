"""Stock's views across a graph break: the views fallen-back graphs returned, and graphs that replay unless an input
shares storage with one.

Note [Stock's views across a graph break]
A graph Dynamo resumed after a graph break that returns a view taken under no_grad of one of its inputs must not be
replayed when that input is stock's view: the graph before fell back, stock returned a view that autograd lets the
caller write in place where eager's refuses, and eager's no_grad view of it would then refuse its ``grad_fn`` where
stock's answers (fuzzer s31_447). Falling back whenever the input *may* be stock's view is wrong the other way: when
the input is eager's own tensor, the caller gets stock's view, which accepts a write that eager's no_grad view
refuses; the write bumps the input's version, and a view that the graph before replayed faithfully then refuses its
``grad_fn``, a crash where stock runs (fuzzer s801_177). Each graph is compiled alone, so neither can be decided
when compiling, but it can be on each call: the runtime records the storages of the views that fallen-back graphs
return (while any of those views lives), and such a graph is compiled both ways; a call replays unless an input
that crosses the break shares storage with a recorded view, and runs stock's program otherwise. A recorded storage
whose views all died counts no more. One whose memory a new storage reused can count until it is purged: that only
sends a call to stock's program, the behaviour every call had before.
The fallbacks that keep eager's view from crossing a graph break (a no_grad view, a multi-output view: Dynamo would
crash wrapping it for the next graph were its base written in between) buy stock's fresh tensor only where stock
compiles. Where the inner backend rejects stock's graph (Note [Graphs the inner backend rejects]), the graph would
run uncompiled and return eager's views anyway, so the program is replayed as if those views crossed
(``stock_unless_rejected``), its core compiled and nothing recorded; eager, the ceiling and the uncompiled graph
all hand the next graph the same view (fuzzer s1831_530, _1210: every strategy crashes, as eager's views do).
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import _torch_internals as ti
from .fallbacks import Fallback, FallbackKind
from .graph_meta import GraphMeta, restricted_view
from .outcomes import FALLBACKS

log = logging.getLogger("predispatch_views")

# storage -> the live views of it that stock's programs returned, by id (a WeakSet would compare tensors with ``==``,
# elementwise, when one is recorded twice: fuzzer s904_259)
_RECORDED: dict[Any, weakref.WeakValueDictionary[int, torch.Tensor]] = {}
_PURGE_AT = [1024]  # purge dead entries when the table grows past this (doubled after each purge)


def eager_restricted_outputs(meta: GraphMeta) -> frozenset[int]:
    """The outputs eager returns as views autograd forbids rebasing (a multi-output view's, a no_grad view): where
    stock returns them as no views (the unsafe fix), the caller may write them as eager's refuses (fuzzer
    s1820_651), so they count as stock's views."""
    return frozenset(k for k, n in enumerate(meta.outputs) if restricted_view(meta, n))


def record_stock_views(outputs: Any, restricted: frozenset[int] = frozenset()) -> None:
    """Remember the views among a fallen-back program's outputs, and its outputs at ``restricted``."""
    for k, t in enumerate(ti.tree_leaves(outputs)):
        if isinstance(t, torch.Tensor) and (ti.is_view(t) or k in restricted) and (key := ti.storage_ref(t)):
            _RECORDED.setdefault(key, weakref.WeakValueDictionary())[id(t)] = t
    if len(_RECORDED) > _PURGE_AT[0]:
        for key in [k for k, views in _RECORDED.items() if not views or k.expired()]:
            del _RECORDED[key]
        _PURGE_AT[0] = max(1024, 2 * len(_RECORDED))


def shares_storage_with_a_stock_view(t: Any) -> bool:
    if not isinstance(t, torch.Tensor) or not _RECORDED:
        return False
    views = _RECORDED.get(ti.storage_ref(t))
    return bool(views)


def recording_stock_views(run: Callable[..., Any], restricted: frozenset[int] = frozenset()) -> Callable[..., Any]:
    """``run`` (a fallen-back program), recording the views it returns (and its outputs at ``restricted``)."""

    def recorded(*args: Any) -> Any:
        outputs = run(*args)
        record_stock_views(outputs, restricted)
        return outputs

    return recorded


def replay_unless_stock_views(
    replay: Callable[..., Any], stock: Callable[..., Any], inputs: Sequence[int], on_use: Callable[[int], None]
) -> Callable[..., Any]:
    """``replay``, or ``stock`` (after ``on_use(k)``) for calls where input ``k`` of ``inputs`` shares storage with a
    view a fallen-back program returned (Note [Stock's views across a graph break])."""

    def run(*args: Any) -> Any:  # Dynamo calls a backend's result with positional inputs
        k = next((k for k in inputs if shares_storage_with_a_stock_view(args[k])), None)
        if k is None:
            return replay(*args)
        on_use(k)
        return stock(*args)

    return run


def a_checked_replay_may_do(fallback: Fallback, graph_breaks: Any) -> bool:  # graph_meta.GraphBreaks
    """Whether the replay with the crossing inputs checked on each call may stand where ``fallback`` does: the rule
    about stock's views fell back, or a cut was tried in a graph Dynamo resumed, whose segments may have met that
    rule (fuzzer s1830_388: cut around a no_grad write, a later segment returns a no_grad view of an input)."""
    if fallback.kind is FallbackKind.NO_GRAD_VIEW_OF_INPUT_AFTER_GRAPH_BREAK:
        return True
    return fallback.cut_after is not None and graph_breaks.before and not graph_breaks.checked_inputs


def replayed_unless_stock_views(
    n_inputs: int,
    graph_breaks: Any,  # graph_meta.GraphBreaks
    fallback: Fallback,
    label: str,
    strict_error: type[Exception] | None,
    compile_replay: Callable[..., Any],  # (graph_breaks=) -> pipeline.CompiledProgram, not falling back to stock
    compile_stock: Callable[[], Callable[..., Any]],
) -> Any:
    """The program replayed with its crossing inputs checked on each call, and stock's program for the calls that
    fail the check, logged (or raised under strict) on the first; None where even the checked replay falls back
    (Note [Stock's views across a graph break])."""
    crossing = frozenset(i for i in range(n_inputs) if graph_breaks.input_crosses(i))
    replay = compile_replay(graph_breaks=dataclasses.replace(graph_breaks, checked_inputs=crossing))
    if replay.fallback is not None:
        return None
    logged: list[int] = []
    stock, deferred, records = deferring_fallbacks(compile_stock)

    def on_use(k: int) -> None:
        if strict_error is not None:
            raise strict_error(fallback.reason)
        if not logged:
            logged.append(k)
            log.info("input %d is stock's view: the call runs stock's program: %s [in %s]", k, fallback.reason, label)
            FALLBACKS.append((label, fallback.reason))
            FALLBACKS.extend(deferred)
            for record in records:
                log.handle(record)

    replay.run = replay_unless_stock_views(replay.run, recording_stock_views(stock), sorted(crossing), on_use)
    replay.notes.append("stock's program for calls whose inputs share storage with a view stock returned")
    replay.may_run_stock = True
    return replay


def stock_unless_rejected(
    fallback: Fallback,
    graph_breaks: Any,  # graph_meta.GraphBreaks
    compile_stock: Callable[[], Any],  # -> pipeline.CompiledProgram, stock's, the fallback recorded
    compile_replay: Callable[..., Any],  # (graph_breaks=) -> pipeline.CompiledProgram, not falling back to stock
) -> Any:
    """Stock's program; or, where the fallback only keeps a view of eager's from crossing a graph break and the inner
    backend rejects stock's graph (which then runs uncompiled, returning eager's views all the same), the program
    replayed as if that view crossed, with nothing recorded (Note [Stock's views across a graph break])."""
    if fallback.kind not in _KEEPS_EAGERS_VIEW_FROM_A_BREAK or graph_breaks.eager_views_cross:
        return compile_stock()
    stock, deferred, records = deferring_fallbacks(compile_stock)
    if stock.runs_uncompiled:
        replay = compile_replay(graph_breaks=dataclasses.replace(graph_breaks, eager_views_cross=True))
        if replay.fallback is None:
            replay.notes.append(f"replayed where stock's compile failed, though {fallback.reason}")
            return replay
    FALLBACKS.extend(deferred)
    for record in records:
        log.handle(record)
    return stock


_KEEPS_EAGERS_VIEW_FROM_A_BREAK = (
    FallbackKind.NO_GRAD_VIEW_AT_GRAPH_BREAK,
    FallbackKind.NO_GRAD_VIEW_OF_INPUT_AFTER_GRAPH_BREAK,
    FallbackKind.MULTI_OUTPUT_VIEW_AT_GRAPH_BREAK,
)


def deferring_fallbacks(compile_stock: Callable[[], Callable[..., Any]]) -> tuple[Any, list[Any], list[Any]]:
    """Stock's program, and the fallbacks its compile listed and logged (its graph may run uncompiled: fuzzer
    s1830_455), held back: they are reported where a call runs it, not where the replay stands."""
    earlier, records = list(FALLBACKS), []  # set aside: a full deque drops from the left, so no count would do

    def hold(record: logging.LogRecord) -> bool:
        records.append(record)
        return False

    FALLBACKS.clear()
    log.addFilter(hold)
    try:
        stock = compile_stock()
    finally:
        log.removeFilter(hold)
        deferred = list(FALLBACKS)
        FALLBACKS.clear()
        FALLBACKS.extend(earlier)
    return stock, deferred, records
