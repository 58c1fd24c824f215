"""What one compilation produced (``CompiledProgram``), kept for explain(), and the strict mode's error."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import fx

from .analysis import EpilogueSelection
from .fallbacks import Fallback
from .functionalize import FunctionalizedProgram
from .slicing import SlicedProgram

# How many times a program may be cut in two, recursively (Note [Segments] in segments.py): at most 2**3 segments.
MAX_CUT_DEPTH = 3


class StrictModeError(RuntimeError):
    """Raised instead of falling back when the backend was built with strict=True."""


@dataclass
class CompiledProgram:
    """What one compilation produced; every stage's result is kept for explain()."""

    run: Callable[..., Any]
    pre_dispatch: fx.GraphModule | None = None
    selection: EpilogueSelection | None = None
    functionalized: FunctionalizedProgram | None = None
    sliced: SlicedProgram | None = None
    epilogue_source: str | None = None
    fallback: Fallback | None = None  # why the program is not replayed
    # Outputs eager returns as views autograd forbids rebasing (Note [Stock's views across a graph break]).
    restricted_outputs: frozenset[int] = frozenset()
    notes: list[str] = field(default_factory=list)
    runs_uncompiled: bool = False  # Dynamo's graph as it is: the inner backend rejected it
    may_run_stock: bool = False  # some calls run stock's program (Note [Stock's views across a graph break])
    # A program cut in two (Note [Segments] in segments.py): its halves, in order; the fields above stay empty.
    segments: list[CompiledProgram] = field(default_factory=list)
    # CPU seconds (this process and its children: gcc) per compile stage, in order; explain() shows them.
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def fallback_reason(self) -> str | None:
        return self.fallback.reason if self.fallback is not None else None

    @property
    def functional(self) -> fx.GraphModule | None:
        """The view-preserving functional graph (built on first access: explain() asks, compiling does not)."""
        return self.functionalized.functional if self.functionalized is not None else None


def unset_run(*args: Any) -> Any:
    raise AssertionError("compiled program was not built")
