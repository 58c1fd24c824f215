"""The gap to the ceiling (issue 22), shared by the parity suite's report and the fuzzer's.

The ceiling is ``dynamo_eager`` (strategies.py): Dynamo with ``backend="eager"``, nothing below Dynamo traced or
compiled, the most fidelity any design below Dynamo can reach. Per entry point of the prototype (the backend,
``compile_function``; each inner and strategy setting), over the cases or programs whose eager forward runs and
that the entry point, its stock control and the ceiling all ran:

    gap closed = (entry point matches - stock matches) / (ceiling matches - stock matches)

A match is a case or program that matches eager on every probe (a fallback that matched counts). ``below the
ceiling`` counts where the entry point differs from eager while the ceiling matches: the engine's work list. Why,
per program: the fallback reasons the entry point logged there, else the kind and probe of its first difference.

The invariant is still judged against stock (fuzz.py's rules): the ceiling only measures how much is left.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .. import fallbacks as fallback_list
from .strategies import CEILING

STOCK = "stock"
PROTOTYPE_NAMES = ("prototype", "prototype_fn")
ENTRY_POINTS = {"prototype": "backend", "prototype_fn": "compile_function"}


class LabelParts(NamedTuple):
    name: str
    inner: str
    setting: str


def label_parts(label: str) -> LabelParts:
    """``name[inner,setting]`` (fuzz.FuzzStrategy), ``name[inner]`` or ``name`` (eager)."""
    name, _, rest = label.partition("[")
    inner, _, setting = rest.rstrip("]").partition(",")
    return LabelParts(name, inner, setting)


def stock_label_for(label: str, labels: Iterable[str]) -> str | None:
    """The control of a prototype label: stock with the same inner and setting."""
    parts = label_parts(label)
    return next((x for x in labels if label_parts(x) == (STOCK, parts.inner, parts.setting)), None)


def ceiling_label_for(label: str, labels: Iterable[str]) -> str | None:
    """The ceiling under the same setting (its inner is Dynamo's ``eager``, whatever the prototype's)."""
    setting = label_parts(label).setting
    return next((x for x in labels if label_parts(x).name == CEILING and label_parts(x).setting == setting), None)


class Result(NamedTuple):
    """One case or program under one strategy, as the gap needs it."""

    kind: str  # match, divergence or crash
    probe: str | None  # the first probe that differs (None on a match)
    fallbacks: tuple[str, ...]  # the reasons it logged, each once


def is_below_the_ceiling(entry: Result | None, ceiling: Result | None) -> bool:
    return entry is not None and ceiling is not None and entry.kind != "match" and ceiling.kind == "match"


def reason_kind(reason: str) -> str:
    """A logged fallback reason as its entry of the fallback list (fallbacks.py: the entry whose marker the message
    holds, the longest where several do), so that one kind counts once however its message names the nodes; the
    message itself where no entry matches."""
    entries = [r for r in fallback_list.FALLBACK_REASONS if r.marker and r.marker in reason]
    return max(entries, key=lambda r: len(r.marker)).summary if entries else reason


def why(entry: Result) -> list[str]:
    """Why an entry point is below the ceiling on one program: the kinds of its fallbacks, else its first
    difference."""
    if entry.fallbacks:
        return list(dict.fromkeys(reason_kind(reason) for reason in entry.fallbacks))
    probe = (entry.probe or "?").partition("@")[0]  # a later call's probe counts with the first call's
    return [f"no fallback: {entry.kind} in {probe}"]


@dataclass
class Gap:
    """One entry point against its stock and the ceiling, over the programs all three ran whose eager forward runs."""

    label: str
    stock_label: str
    ceiling_label: str
    programs: int = 0
    stock: int = 0
    ceiling: int = 0
    matched: int = 0
    fallbacks: int = 0
    # Matches without a fallback: compile_function's fallback is eager itself, so its matches (and its gap closed,
    # which can pass 100% where Dynamo itself diverges) count the functions it ran eagerly; this does not.
    matched_not_fallen_back: int = 0
    below_the_ceiling: int = 0
    # Fallbacks on programs stock runs: where stock crashes (its compile or its backward), the fallback is the
    # uncompiled graph or stock's own crash, and no compiled form of AOTAutograd's would do better.
    fallbacks_where_stock_runs: int = 0
    reasons: collections.Counter[str] = field(default_factory=collections.Counter)

    @property
    def closed(self) -> float | None:
        reachable = self.ceiling - self.stock
        return None if reachable <= 0 else (self.matched - self.stock) / reachable

    @property
    def entry_point(self) -> str:
        return ENTRY_POINTS.get(label_parts(self.label).name, label_parts(self.label).name)


def gaps(records: Iterable[Mapping[str, Result]], labels: Sequence[str]) -> list[Gap]:
    """``records``: per case or program whose eager forward runs, each strategy's result (absent: did not run)."""
    found: dict[str, Gap] = {}
    for label in labels:
        stock, ceiling = stock_label_for(label, labels), ceiling_label_for(label, labels)
        if label_parts(label).name in PROTOTYPE_NAMES and stock is not None and ceiling is not None:
            found[label] = Gap(label, stock, ceiling)
    for record in records:
        for gap in found.values():
            entry, stock, ceiling = record.get(gap.label), record.get(gap.stock_label), record.get(gap.ceiling_label)
            if entry is None or stock is None or ceiling is None:
                continue
            gap.programs += 1
            gap.stock += stock.kind == "match"
            gap.ceiling += ceiling.kind == "match"
            gap.matched += entry.kind == "match"
            gap.fallbacks += bool(entry.fallbacks)
            gap.fallbacks_where_stock_runs += bool(entry.fallbacks) and stock.kind != "crash"
            gap.matched_not_fallen_back += entry.kind == "match" and not entry.fallbacks
            if is_below_the_ceiling(entry, ceiling):
                gap.below_the_ceiling += 1
                gap.reasons.update(list(dict.fromkeys(why(entry))))  # each reason once per program
    return list(found.values())


def _percent(part: int, whole: int) -> str:
    return f"{part} ({100 * part / whole:.0f}%)" if whole else str(part)


def _closed(gap: Gap) -> str:
    return "n/a (no gap)" if gap.closed is None else f"{100 * gap.closed:.0f}%"


GAP_HEADERS = (
    "entry point",
    "label",
    "ran (eager forward runs)",
    "stock matches",
    "ceiling matches",
    "entry point matches",
    "gap closed",
    "fell back",
    "matched without falling back",
    "below the ceiling",
    "fell back where stock runs",
)


def gap_rows(found: Sequence[Gap]) -> list[tuple[str, ...]]:
    return [
        (
            g.entry_point,
            g.label,
            str(g.programs),
            str(g.stock),
            str(g.ceiling),
            str(g.matched),
            _closed(g),
            _percent(g.fallbacks, g.programs),
            str(g.matched_not_fallen_back),
            str(g.below_the_ceiling),
            _percent(g.fallbacks_where_stock_runs, g.programs),
        )
        for g in found
    ]


def gap_markdown(found: Sequence[Gap], unit: str, top: int = 12) -> list[str]:
    """The gap table, then per entry point the most frequent reasons behind its gap (``unit``: cases, programs)."""
    if not found:
        return []
    lines = [
        "### Gap to the ceiling (issue 22)",
        "",
        f"Over the {unit} whose eager forward runs and that the entry point, its stock and the ceiling all ran: "
        f"{unit} matching eager on every probe (fallbacks that matched count). The ceiling, `{CEILING}`, is Dynamo "
        'with `backend="eager"`: nothing below Dynamo traced or compiled. Gap closed = (entry point - stock) / '
        "(ceiling - stock). `fell back`: the backend handed the graph to stock, or compile_function ran the "
        "function eagerly (compile_function's fallback is eager itself: its matches count those functions, and its gap "
        "closed can pass 100% where Dynamo itself diverges; `matched without falling back` does not count them). "
        "`below the ceiling`: the entry point differs from eager where the ceiling matches. `fell back where stock "
        "runs`: the fallbacks on programs where stock does not crash (the rest fall back where stock's own compile "
        "or backward raises).",
        "",
        "| " + " | ".join(GAP_HEADERS) + " |",
        "|---|---|" + "---:|" * (len(GAP_HEADERS) - 2),
        *("| " + " | ".join(row) + " |" for row in gap_rows(found)),
    ]
    for g in found:
        if not g.reasons:
            continue
        shown = g.reasons.most_common(top)
        more = len(g.reasons) - len(shown)
        lines += ["", f"Behind the gap of {g.label} ({g.below_the_ceiling} {unit} below the ceiling; by {unit}):", ""]
        lines += [f"- {count} x {reason}" for reason, count in shown]
        if more > 0:
            lines.append(f"- ... and {more} other reasons")
    return lines


def gap_text(found: Sequence[Gap]) -> str:
    rows = gap_rows(found)
    widths = [max(len(x) for x in col) for col in zip(GAP_HEADERS, *rows)]
    header = "  ".join(h.ljust(w) for h, w in zip(GAP_HEADERS, widths))
    return "\n".join([header, "-" * len(header), *("  ".join(x.ljust(w) for x, w in zip(r, widths)) for r in rows)])
