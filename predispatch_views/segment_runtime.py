"""Stage 4 for a cut program (Note [Segments] in segments.py): call its stages in order."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from . import _torch_internals as ti

log = logging.getLogger("predispatch_views")


def restoring_grad_mode(run: Callable[..., Any]) -> Callable[..., Any]:
    """An uncompiled segment that raises inside one of its grad-mode regions leaves the caller's grad mode, as
    eager's ``with no_grad()`` does (s1826_889: ``torch.abs(t0, out=t1)`` of overlapping views raised in one)."""

    def run_restoring(*args: Any) -> Any:
        enabled = torch.is_grad_enabled()
        try:
            return run(*args)
        except BaseException:
            ti.SET_GRAD_ENABLED(enabled)
            raise

    return run_restoring


def segments_runtime(plan: Any, runners: list[Callable[..., Any]]) -> Callable[..., Any]:  # plan: segments.Cut
    """Call the stages in order, each with the values its sources name; return the program's outputs."""
    steps = [(stage.name, runner, stage.sources) for stage, runner in zip(plan.stages, runners)]
    outputs = plan.outputs

    def run(*args: Any) -> tuple[Any, ...]:
        values: dict[str, Any] = {"arg": args}
        for name, runner, sources in steps:
            values[name] = runner(*[values[kind][index] for kind, index in sources])
        return tuple(index if kind == "constant" else values[kind][index] for kind, index in outputs)

    return run


def checking_grad_flags(
    run: Callable[..., Any], uncompiled: Callable[..., Any], name: str, handed: list[int], expected: tuple[bool, ...]
) -> Callable[..., Any]:
    """``run``, where the values earlier segments hand the stage (arguments ``handed``) require grad as it was
    compiled for (``expected``); a call whose values differ (the record's answer was wrong) runs the stage's own
    eager ops (``uncompiled``) instead."""
    if not handed:
        return run

    def checked(*args: Any) -> Any:
        if tuple(args[k].requires_grad for k in handed) == expected:
            return run(*args)
        log.warning(
            "predispatch_views: the values handed to segment %s require grad other than it was compiled for; it "
            "runs uncompiled (eager's ops) for this call",
            name,
        )
        return uncompiled(*args)

    return checked
