"""What became of each graph the Dynamo entry points compiled, and every fallback: the records ``report()``
summarizes (each entry is also logged at INFO by the pipeline)."""

from __future__ import annotations

import collections
from typing import Any

import torch

from . import graph_ops
from .dynamo_slice import VIEWS

CompiledProgram = Any  # pipeline.CompiledProgram (not imported: the pipeline imports this module)

# The most recent fallbacks, newest last: (the user's function and file:line, reason); see labels.py.
FALLBACKS: collections.deque[tuple[str, str]] = collections.deque(maxlen=1000)
# Every graph a Dynamo entry point (backend, flag) compiled, newest last: (label, outcome, detail), outcome one of
# GRAPH_OUTCOMES.
GRAPHS: collections.deque[tuple[str, str, str]] = collections.deque(maxlen=10000)
GRAPH_OUTCOMES = ("replayed", "fallback", "no view outputs", "compiled autograd")


def outcome(program: CompiledProgram) -> tuple[str, str]:
    """(one of GRAPH_OUTCOMES, detail): the fallback reason, or the view calls replayed."""
    if program.fallback_reason is not None:
        return "fallback", program.fallback_reason
    if program.sliced is None and not program.segments:
        return program.notes[0] if program.notes else "no view outputs", ""
    views = collections.Counter(
        _view_name(n)
        for p in segments_of(program)
        if p.sliced is not None
        for n in p.sliced.epilogue.graph.nodes
        if _view_name(n) and n.users
    )
    detail = "view calls " + ", ".join(f"{name} x{k}" for name, k in sorted(views.items()))
    if program.segments:
        detail += f", in {len(segments_of(program))} segments"
    if program.pre_dispatch is None and not program.segments:
        detail += ", sliced from Dynamo's graph"  # Note [Slicing Dynamo's graph]: no capture
    return "replayed", detail


def _view_name(n: Any) -> str | None:
    """A replayed view call's name: an aten view (the capture's), or a torch-level one (Note [Slicing Dynamo's
    graph])."""
    if graph_ops.is_view(n):
        return graph_ops.op_name(n)
    name = getattr(n.target, "__name__", "")
    targets = (getattr(torch.Tensor, name, None), getattr(torch, name, None))
    return name if n.op == "call_function" and name in VIEWS and n.target in targets else None


def segments_of(program: CompiledProgram) -> list[CompiledProgram]:
    """The programs that run, in order: the program itself, or its halves' segments (Note [Segments])."""
    if not program.segments:
        return [program]
    return [p for half in program.segments for p in segments_of(half)]


def report() -> str:
    """How many graphs the backend or the flag compiled, by outcome, and the fallback reasons, most frequent
    first (the last 10000 graphs)."""
    outcomes = collections.Counter(outcome for _, outcome, _ in GRAPHS)
    reasons = collections.Counter(detail for _, outcome, detail in GRAPHS if outcome == "fallback")
    lines = [f"predispatch_views: {len(GRAPHS)} graphs compiled"]
    lines += [f"  {outcome}: {outcomes[outcome]}" for outcome in GRAPH_OUTCOMES if outcomes[outcome]]
    lines += [f"  fallback x{k}: {reason}" for reason, k in reasons.most_common()]
    return "\n".join(lines)
