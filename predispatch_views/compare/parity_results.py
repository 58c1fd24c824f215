"""What the parity suite records: one case under one strategy (``CaseRun``), and a whole run (``ParityResults``).

Shared by the runner (parity.py) and the reports (report.py), which both read them: kept apart so that the
report does not import the runner that imports it (no import circle).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from .case_types import Case
from .probes import Raised
from .strategies import Strategy


@dataclass
class Divergence:
    path: str
    expected: Any
    actual: Any


@dataclass
class CaseRun:
    """One case under one strategy."""

    case: Case
    strategy: Strategy
    observations: dict[str, Any] = field(default_factory=dict)
    nodes: collections.Counter[str] | Raised = field(default_factory=collections.Counter)
    fallbacks: list[tuple[str, str]] = field(default_factory=list)
    # Per probe, the first difference from eager; None where it matches (eager's own run has none).
    divergences: dict[str, Divergence | None] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def matched(self) -> int:
        return sum(d is None for d in self.divergences.values())


@dataclass
class ParityResults:
    cases: list[Case]
    strategies: list[Strategy]
    runs: dict[tuple[str, str], CaseRun]  # (case name, strategy label); none for a case in eager_not_run
    seconds: float
    # Cases whose eager reference did not run (its program could not be built, or the worker died), and why.
    # Nothing is compared for them: a strategy that fails the same way would otherwise count as matching eager.
    eager_not_run: dict[str, str] = field(default_factory=dict)

    def run(self, case: str, strategy: str) -> CaseRun | None:
        return self.runs.get((case, strategy))
