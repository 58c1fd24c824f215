"""One row per fuzz run kept in results/fuzz-results.md: the table design/04 quotes (issue 25).

``python -m predispatch_views.compare.fuzz_history`` rewrites results/fuzz-history.md from results/fuzz-results.md
(``--check``: exit status 1 if it is not up to date). Each run there is a ``fuzz.md`` under a header line that
names its command and engine commit; the row sums, per entry point, the invariant's columns over every setting
(``prototype[aot_eager,dynamic]``...) and quotes the default setting's matches and fallbacks.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SOURCE = ROOT / "results" / "fuzz-results.md"
TARGET = ROOT / "results" / "fuzz-history.md"
INVARIANT = ("wrong_where_stock_matches", "crash_where_stock_runs")


@dataclass
class Run:
    seeds: str
    programs: int
    engine: str
    dimensions: str
    rows: dict[str, dict[str, str]]  # strategy label -> column -> cell
    gap: dict[str, dict[str, str]]  # label -> column -> cell of its "Gap to the ceiling" table (empty before it)


def runs(text: str) -> list[Run]:
    """The runs in ``text``, in file order (newest first)."""
    found: list[Run] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        heading = re.match(r"## Differential fuzzing: (\d+) programs, seeds? (.+)$", line)
        if heading is None:
            continue
        header = next((lines[j] for j in range(i - 1, max(i - 4, -1), -1) if lines[j].startswith("_`python")), "")
        engine = re.search(r"engine at commit (\w+)", header)
        dimensions = "classic"
        rows: dict[str, dict[str, str]] = {}
        gap: dict[str, dict[str, str]] = {}
        j = i + 1
        while j < len(lines) and not lines[j].startswith("## Differential fuzzing"):
            if lines[j].startswith("Dimensions: `"):
                dimensions = lines[j].split("`")[1]
            if lines[j].startswith("| entry point | label |") and not gap:
                j = _read_table(lines, j, "label", gap)
                continue
            if lines[j].startswith("| strategy |") and not rows:
                j = _read_table(lines, j, "strategy", rows)
                continue
            j += 1
        seeds = heading.group(2).replace(" ", "")
        found.append(Run(seeds, int(heading.group(1)), engine.group(1) if engine else "?", dimensions, rows, gap))
    return found


def _read_table(lines: list[str], at: int, key: str, into: dict[str, dict[str, str]]) -> int:
    """Read the Markdown table whose header is ``lines[at]`` into ``into`` (its ``key`` column's cell -> column ->
    cell); return the index of the first line after it."""
    columns = [c.strip() for c in lines[at].strip("|").split("|")]
    j = at + 2
    while j < len(lines) and lines[j].startswith("|"):
        row = dict(zip(columns, (c.strip() for c in lines[j].strip("|").split("|"))))
        into[row[key]] = row
        j += 1
    return j


def _entry_point(label: str) -> str | None:
    name = label.split("[")[0]
    return {"stock": "stock", "prototype": "backend", "prototype_fn": "compile_function"}.get(name)


def _default(label: str) -> bool:
    return "," not in label  # prototype[aot_eager], not prototype[aot_eager,dynamic]


def _apart(run: Run, columns: tuple[str, ...], entries: tuple[str, ...]) -> str:
    """Columns reported apart from the invariant, summed over the entry points' settings; - before they existed."""
    found = [r.get(c) for r in run.rows.values() if _entry_point(r["strategy"]) in entries for c in columns]
    return str(sum(int(c) for c in found if c is not None)) if any(c is not None for c in found) else "-"


def table(all_runs: list[Run]) -> list[str]:
    lines = [
        "| seeds | programs | engine | inner | dimensions | stock matches | backend matches | backend fallbacks "
        "| backend wrong / crash where stock | compile_function matches | compile_function fallbacks "
        "| compile_function wrong / crash where stock | as the ceiling | compile_function as stock's one graph |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in all_runs:
        cells: dict[str, str] = {}
        for entry in ("stock", "backend", "compile_function"):
            labels = [label for label in run.rows if _entry_point(label) == entry]
            default = next((label for label in labels if _default(label)), None)
            row = run.rows.get(default or "", {})
            cells[f"{entry} matches"] = row.get("match", "-")
            cells[f"{entry} fallbacks"] = row.get("fallback", "-")
            sums = [sum(int(run.rows[label].get(c, "0")) for label in labels) for c in INVARIANT]
            cells[f"{entry} invariant"] = " / ".join(map(str, sums)) if labels else "-"
        ceiling = _apart(run, ("crash_as_the_ceiling", "wrong_as_the_ceiling"), ("backend", "compile_function"))
        one_graph = _apart(run, ("as_stock_one_graph",), ("compile_function",))
        stock = next((label for label in run.rows if _entry_point(label) == "stock" and _default(label)), "")
        inner = stock[stock.find("[") + 1 : -1] or "-"
        lines.append(
            f"| {run.seeds} | {run.programs} | {run.engine} | {inner} | {run.dimensions} | {cells['stock matches']} | "
            f"{cells['backend matches']} | {cells['backend fallbacks']} | {cells['backend invariant']} | "
            f"{cells['compile_function matches']} | {cells['compile_function fallbacks']} | "
            f"{cells['compile_function invariant']} | {ceiling} | {one_graph} |"
        )
    return lines


def gap_table(all_runs: list[Run]) -> list[str]:
    """Each run's gap to the ceiling, per entry point and setting, as its fuzz.md gives it."""
    columns = ("ran (eager forward runs)", "gap closed", "fell back", "fell back where stock runs")
    lines = [
        "| seeds | programs | engine | label | ran (eager forward runs) | gap closed | fell back | fell back where "
        "stock runs |",
        "|---|---:|---|---|---:|---:|---:|---:|",
    ]
    for run in all_runs:
        for label, row in run.gap.items():
            cells = " | ".join(row.get(c, "-") for c in columns)
            lines.append(f"| {run.seeds} | {run.programs} | {run.engine} | {label} | {cells} |")
    return lines


def render(text: str) -> str:
    all_runs = runs(text)
    return "\n".join(
        [
            "# Fuzz history",
            "",
            "<!-- Generated file, do not edit: python -m predispatch_views.compare.fuzz_history, from "
            "results/fuzz-results.md. -->",
            "",
            "One row per run kept in [fuzz-results.md](fuzz-results.md), newest first; "
            f"{sum(r.programs for r in all_runs)} programs in all. Matches and fallbacks are the default setting's "
            "(`prototype[aot_eager]`...); `wrong / crash where stock` sums the invariant's two columns "
            "(`wrong_where_stock_matches`, `crash_where_stock_runs`) over every setting of the entry point "
            "(dynamic shapes, compiled autograd): a program counts once per setting it breaks the invariant in; "
            "`as the ceiling` (a crash where stock runs or a divergence where stock matches that the ceiling shows "
            "too, Dynamo's own) and `compile_function as stock's one graph` (its failures that functorch's "
            "`aot_function` on the whole function shares) are reported apart from the invariant "
            "(Note [Fuzz rules] in compare/fuzz.py; `-` where the run predates the column).",
            "",
            "## Every run",
            "",
            *table(all_runs),
            "",
            "## Gap to the ceiling, per run",
            "",
            "Each run's own table (`### Gap to the ceiling` of its fuzz.md, issue 22), over the programs whose eager "
            "forward runs; runs before the ceiling existed have none. Gap closed = (entry point - stock) / (ceiling - "
            "stock) in programs matching eager; `fell back`: the backend handed a graph to stock, or compile_function "
            "ran the function eagerly; `fell back where stock runs`: those where stock does not crash.",
            "",
            *gap_table(all_runs),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m predispatch_views.compare.fuzz_history", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if results/fuzz-history.md is not up to date")
    args = parser.parse_args(argv)
    expected = render(SOURCE.read_text())
    if args.check:
        current = TARGET.read_text() if TARGET.exists() else ""
        print("up to date" if current == expected else f"{TARGET.name} is stale")
        return 0 if current == expected else 1
    TARGET.write_text(expected)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
