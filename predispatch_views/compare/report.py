"""Rendering parity results: a plain-text table, Markdown (parity.md) and CSV (parity.csv)."""

from __future__ import annotations

import csv
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .ceiling import Gap, Result, gap_markdown, gap_text, gaps
from .parity_results import CaseRun, Divergence, ParityResults
from .probes import PROBES, Raised, describe, first_difference

AS_STRIDED = "AsStridedBackward0"


def stock_version_line() -> str:
    """Which torch "stock" is: its behaviour changes between releases (design/02), so every table names it."""
    return f"stock = torch {torch.__version__} (`torch.compile(fn, backend=inner)` of the torch that ran this table)"


@dataclass(frozen=True)
class Summary:
    label: str
    matched: int
    total: int
    cases_diverging: int
    cases: int
    as_strided: int
    nodes: int
    eager_nodes: int
    same_node_types: int  # cases whose reachable autograd nodes are eager's, type for type
    fallback_cases: int


def _node_count(nodes: Counter[str] | Raised) -> int:
    return 0 if isinstance(nodes, Raised) else sum(nodes.values())


def summarize(results: ParityResults) -> list[Summary]:
    out = []
    for s in results.strategies:
        runs = [r for c in results.cases if (r := results.run(c.name, s.label)) is not None]
        eager = [results.run(r.case.name, results.strategies[0].label) for r in runs]
        out.append(
            Summary(
                label=s.label,
                matched=sum(r.matched for r in runs),
                total=sum(len(r.divergences) for r in runs),
                cases_diverging=sum(r.matched < len(r.divergences) for r in runs),
                cases=len(runs),
                as_strided=sum(0 if isinstance(r.nodes, Raised) else r.nodes[AS_STRIDED] for r in runs),
                nodes=sum(_node_count(r.nodes) for r in runs),
                eager_nodes=sum(_node_count(e.nodes) for e in eager if e is not None),
                same_node_types=sum(e is not None and r.nodes == e.nodes for r, e in zip(runs, eager)),
                fallback_cases=sum(bool(r.fallbacks) for r in runs),
            )
        )
    return out


def _result(reference: CaseRun, r: CaseRun) -> Result:
    first = next((probe for probe, d in r.divergences.items() if d is not None), None)
    kind = "match" if first is None else "divergence"
    raised = first is not None and isinstance(r.observations.get(first), Raised)
    if raised and not isinstance(reference.observations.get(first), Raised):
        kind = "crash"
    return Result(kind, first, tuple(dict.fromkeys(reason for _, reason in r.fallbacks)))


def parity_gaps(results: ParityResults) -> list[Gap]:
    """Per entry point, the gap to the ceiling over the cases whose eager forward runs (ceiling.py)."""
    eager_label = results.strategies[0].label
    labels = [s.label for s in results.strategies]
    records = []
    for c in results.cases:
        reference = results.run(c.name, eager_label)
        if reference is None or isinstance(reference.observations.get("forward"), Raised):
            continue
        runs = {label: r for label in labels[1:] if (r := results.run(c.name, label)) is not None}
        records.append({label: _result(reference, r) for label, r in runs.items()})
    return gaps(records, labels)


HEADERS = (
    "strategy",
    "probes matched",
    "cases diverging",
    "AsStridedBackward0",
    "autograd nodes (eager)",
    "cases with eager's node types",
    "fallback cases",
)


def _rows(results: ParityResults) -> list[tuple[str, ...]]:
    return [
        (
            s.label,
            f"{s.matched}/{s.total}",
            f"{s.cases_diverging}/{s.cases}",
            str(s.as_strided),
            f"{s.nodes} ({s.eager_nodes})",
            f"{s.same_node_types}/{s.cases}",
            str(s.fallback_cases) if s.label.startswith("prototype") else "-",
        )
        for s in summarize(results)
    ]


@dataclass(frozen=True)
class DivergenceFilter:
    """Which divergences to list: substrings of the strategy label and of the case name (None: all)."""

    strategy: str | None = None
    case: str | None = None

    def keeps(self, case: str, label: str) -> bool:
        return (self.strategy is None or self.strategy in label) and (self.case is None or self.case in case)


NOT_RUN = "eager did not run"


def _not_run_note(results: ParityResults) -> str:
    if not results.eager_not_run:
        return ""
    lines = [f"- {case}: {why}" for case, why in results.eager_not_run.items()]
    return (
        f"INCOMPLETE: eager did not run on {len(results.eager_not_run)} of {len(results.cases)} cases; they are "
        "left out of every count above:\n" + "\n".join(lines)
    )


# Note [Divergences in view-node names only]
# slice_regen regenerates each output of unbind/split as its own select/slice: eager's refusal of in-place
# writes survives, but the message names the regenerating node ("Output 0 of Select" for "Output 2 of Unbind")
# and so does grad_fn. Counting those probes apart tells a renamed node from a changed behaviour.
_VIEW_NODE_NAMES = re.compile(
    r"\bOutput \d+ of (?:Unbind|Select|Split|SplitWithSizes|Slice)\b"
    r"|\b(?:Unbind|Select|Split|SplitWithSizes|Slice)Backward0\b"
)


def _without_view_node_names(value: Any) -> Any:
    if isinstance(value, Raised):
        return Raised(value.type, _VIEW_NODE_NAMES.sub("<view node>", value.message))
    if isinstance(value, str):
        return _VIEW_NODE_NAMES.sub("<view node>", value)
    if isinstance(value, dict):
        return {k: _without_view_node_names(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_without_view_node_names(v) for v in value)
    return value


def name_only_divergences(results: ParityResults, label: str) -> int:
    """Diverging probes of the strategy that match eager once view-node names are ignored."""
    count = 0
    for c in results.cases:
        r, e = results.run(c.name, label), results.run(c.name, results.strategies[0].label)
        if r is None or e is None:
            continue
        for probe, d in r.divergences.items():
            if (
                d is not None
                and first_difference(
                    _without_view_node_names(e.observations[probe]), _without_view_node_names(r.observations[probe])
                )
                is None
            ):
                count += 1
    return count


def _name_only_note(results: ParityResults) -> str:
    counts = {s.label: name_only_divergences(results, s.label) for s in results.strategies[1:]}
    shown = [f"{label} {n}" for label, n in counts.items() if n]
    if not shown:
        return ""
    return (
        "Diverging probes that match eager once view-node names are ignored (`Output 0 of Select` for "
        "`Output 2 of Unbind`, `SelectBackward0` for `UnbindBackward0`; Note [Divergences in view-node names "
        "only] in compare/report.py): " + ", ".join(shown) + "."
    )


def _case_matrix(results: ParityResults) -> tuple[list[str], list[list[str]]]:
    """Per case, per strategy: probes matched (with an F when the prototype fell back)."""
    labels = [s.label for s in results.strategies[1:]]
    rows = []
    for c in results.cases:
        row = [c.name]
        if c.name in results.eager_not_run:
            rows.append(row + [NOT_RUN] * len(labels))
            continue
        for label in labels:
            r = results.run(c.name, label)
            if r is None:
                row.append("")
                continue
            cell = f"{r.matched}/{len(r.divergences)}"
            row.append(cell + (" F" if r.fallbacks else ""))
        rows.append(row)
    return ["case", *labels], rows


def _text(headers: tuple[str, ...] | list[str], rows: list[tuple[str, ...]] | list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    body = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in rows]
    return "\n".join([line, "-" * len(line), *body])


def _markdown(headers: tuple[str, ...] | list[str], rows: list[tuple[str, ...]] | list[list[str]]) -> str:
    def cells(row: tuple[str, ...] | list[str]) -> str:
        return "| " + " | ".join(" ".join(str(x).split()).replace("|", "\\|") for x in row) + " |"

    return "\n".join([cells(headers), "|" + "---|" * len(headers), *(cells(r) for r in rows)])


def text_table(results: ParityResults) -> str:
    n = len(results.cases)
    title = f"Parity with eager: {n} cases x {len(PROBES)} probes ({', '.join(PROBES)})\n{stock_version_line()}"
    headers, rows = _case_matrix(results)
    per_case = "Per case (probes matched; F: prototype fell back)"
    note = _not_run_note(results)
    table = f"{title}\n\n{_text(HEADERS, _rows(results))}\n\n{note + chr(10) * 2 if note else ''}"
    found = parity_gaps(results)
    gap = f"Gap to the ceiling (cases whose eager forward runs)\n\n{gap_text(found)}\n\n" if found else ""
    return f"{table}{gap}{per_case}\n\n{_text(headers, rows)}"


def _same_as_stock(results: ParityResults, r: CaseRun) -> str:
    """Whether a prototype run that fell back behaves exactly as stock with the same inner (it should)."""
    stock = results.run(r.case.name, f"stock[{r.strategy.inner}]")
    if stock is None:
        return "?"
    same = all(first_difference(stock.observations[p], r.observations[p]) is None for p in PROBES)
    return "yes" if same else "no"


def _fallback_rows(results: ParityResults) -> list[tuple[str, str, str, str]]:
    rows = []
    for (case, label), r in results.runs.items():
        for graph, reason in dict.fromkeys(r.fallbacks):  # a recompile logs the same reason again
            rows.append((case, label, f"{graph}: {reason}", _same_as_stock(results, r)))
    return rows


FALLBACK_HEADERS = ("case", "strategy", "reason", "behaves as stock")


def text_fallbacks(results: ParityResults) -> str:
    rows = _fallback_rows(results)
    if not rows:
        return "\nPrototype fallbacks: none"
    return "\nPrototype fallbacks\n\n" + _text(FALLBACK_HEADERS, rows)


def _divergence_rows(
    results: ParityResults, only: DivergenceFilter = DivergenceFilter()
) -> list[tuple[str, str, str, str, str, str]]:
    rows = []
    for (case, label), r in results.runs.items():
        if not only.keeps(case, label):
            continue
        for probe, d in r.divergences.items():
            if d is not None:
                rows.append((case, label, probe, d.path, describe(d.expected), describe(d.actual)))
    return rows


def text_divergences(results: ParityResults, only: DivergenceFilter = DivergenceFilter()) -> str:
    rows = _divergence_rows(results, only)
    if not rows:
        return "\nDivergences: none"
    blocks = [
        f"{case} / {label} / {probe} at {path}\n    eager:    {expected}\n    strategy: {actual}"
        for case, label, probe, path, expected, actual in rows
    ]
    return "\nDivergences (eager vs strategy)\n\n" + "\n".join(blocks)


def markdown(
    results: ParityResults, *, show_divergences: bool = False, only: DivergenceFilter = DivergenceFilter()
) -> str:
    headers, rows = _case_matrix(results)
    parts = [
        "## Parity with eager",
        "",
        stock_version_line(),
        "",
        f"{len(results.cases)} cases x {len(PROBES)} probes ({', '.join(PROBES)}); every probe runs on the "
        f"outputs of a fresh call and is compared with eager (same values and grads, or the same exception).",
        "",
        _markdown(HEADERS, _rows(results)),
        "",
    ]
    if note := _not_run_note(results):
        parts += [f"**{note.splitlines()[0]}**", "", *note.splitlines()[1:], ""]
    if gap := gap_markdown(parity_gaps(results), "cases"):
        parts += [*gap, ""]
    parts += [
        _name_only_note(results),
        "",
        "### Prototype fallbacks",
        "",
    ]
    fallbacks = _fallback_rows(results)
    parts.append(_markdown(FALLBACK_HEADERS, fallbacks) if fallbacks else "None.")
    parts += ["", "### Per case", "", "Probes matched; F: the prototype fell back to stock.", ""]
    parts.append(_markdown(headers, rows))
    if show_divergences:
        divergences = _divergence_rows(results, only)
        which = "" if only == DivergenceFilter() else f" (strategy ~ {only.strategy!r}, case ~ {only.case!r})"
        parts += ["", f"### Divergences{which}", ""]
        parts.append(
            _markdown(("case", "strategy", "probe", "where", "eager", "strategy's"), divergences)
            if divergences
            else "None."
        )
    return "\n".join(parts) + "\n"


CSV_FIELDS = (
    "case",
    "strategy",
    "inner",
    "probe",
    "status",
    "where",
    "eager",
    "observed",
    "as_strided_nodes",
    "autograd_nodes",
    "eager_autograd_nodes",
    "fallbacks",
    "seconds",
)


def write_csv(results: ParityResults, path: Path) -> None:
    eager_label = results.strategies[0].label
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_FIELDS)
        for (case, _), r in results.runs.items():
            reference = results.run(case, eager_label)
            for probe, d in r.divergences.items():
                writer.writerow(_csv_row(r, reference, probe, d))
        for case, why in results.eager_not_run.items():
            writer.writerow([case, "", "", "", NOT_RUN, "", "", why, "", "", "", "", ""])


def _csv_row(r: CaseRun, reference: CaseRun | None, probe: str, d: Divergence | None) -> list[str]:
    nodes = r.nodes
    eager_nodes = reference.nodes if reference is not None else Counter()
    expected = reference.observations.get(probe) if reference is not None else None
    return [
        r.case.name,
        r.strategy.name,
        r.strategy.inner or "",
        probe,
        "match" if d is None else "diverge",
        "" if d is None else d.path,
        describe(expected if d is None else d.expected, 500),
        describe(r.observations.get(probe) if d is None else d.actual, 500),
        str(nodes) if isinstance(nodes, Raised) else str(nodes[AS_STRIDED]),
        str(nodes) if isinstance(nodes, Raised) else str(_node_count(nodes)),
        str(eager_nodes) if isinstance(eager_nodes, Raised) else str(_node_count(eager_nodes)),
        "; ".join(reason for _, reason in dict.fromkeys(r.fallbacks)),
        f"{r.seconds:.2f}",
    ]
