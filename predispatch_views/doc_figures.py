"""Figures quoted in README.md and design/*.md, tied to the generated results they come from (issue 25).

A quoted figure is written as a marker around its value::

    <!-- fig design/results.md :: seed :: 1000 :: prototype[aot_eager] :: x eager -->1.19<!-- /fig -->

which renders as ``1.19``. The marker names a generated Markdown file (``file#text``: only tables under a heading,
at any level, that contains ``text``), the leading cells of one table row in it (as many as make the row unique) and a
column of that table, separated by ``::`` (a ``|`` would split a Markdown table cell that holds a marker); the
value is that cell, without bold markers.
A whole table is quoted the same way, its marker lines around it::

    <!-- table results/seed-measurement.md#Medians -->
    | ... the table, as it is in the results file ... |
    <!-- /table -->

(``file#text``: the one table under a heading that contains ``text``).
``python -m predispatch_views.doc_figures`` lists every marker whose value differs from its cell (exit status
1), ``--write`` rewrites the values from the results, and tests/test_docs.py fails on any difference: a figure
cannot go stale silently when its results file is regenerated.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ("README.md", "design/*.md")
# Not after a backtick: a marker shown as code (README explains the syntax) is no figure.
MARKER = re.compile(r"(?<!`)<!-- fig (?P<ref>[^>]*?) -->(?P<value>.*?)<!-- /fig -->", re.DOTALL)
TABLE = re.compile(r"^<!-- table (?P<ref>[^>]*?) -->\n(?P<value>(?:\|.*\n)*)<!-- /table -->$", re.MULTILINE)


@dataclass(frozen=True)
class Figure:
    document: Path
    source: str  # a file under ROOT
    row: tuple[str, ...]  # leading cells of the row
    column: str
    quoted: str


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _tables(text: str) -> list[tuple[str, list[str], list[list[str]], str]]:
    """(the headings above it, outermost first, joined by newlines; header; rows; its lines) of every Markdown
    table."""
    tables: list[tuple[str, list[str], list[list[str]], str]] = []
    lines = text.splitlines()
    path: list[str] = []  # the enclosing headings, one per level
    i = 0
    while i < len(lines) - 1:
        if lines[i].startswith("#"):
            level = len(lines[i]) - len(lines[i].lstrip("#"))
            path = [*path[: level - 1], *[""] * max(0, level - 1 - len(path)), lines[i]]
        heading = "\n".join(h for h in path if h)
        if lines[i].startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            start, header, rows = i, _cells(lines[i]), []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            tables.append((heading, header, rows, "\n".join(lines[start:i]) + "\n"))
        else:
            i += 1
    return tables


def table_text(source: str) -> str:
    """The lines of the one table in ``source`` (``file#text``) under a heading that contains ``text``."""
    path, _, under = source.partition("#")
    found = [text for heading, _, _, text in _tables((ROOT / path.strip()).read_text()) if under.strip() in heading]
    if len(found) != 1:
        raise LookupError(f"{source}: {len(found)} tables under a heading containing {under.strip()!r}")
    return found[0]


def lookup(source: str, row: tuple[str, ...], column: str) -> str:
    """The cell of ``column`` in the one row of ``source``'s tables whose leading cells are ``row``."""
    found = []
    path, _, under = source.partition("#")
    for heading, header, rows, _ in _tables((ROOT / path).read_text()):
        if column not in header or under not in heading:
            continue
        for cells in rows:
            if tuple(cells[: len(row)]) == row and len(cells) == len(header):
                found.append(cells[header.index(column)])
    if len(found) != 1:
        raise LookupError(f"{source}: {len(found)} rows start with {' | '.join(row)} and have a column {column!r}")
    return found[0].replace("**", "").strip()


def _paths(documents: tuple[str | Path, ...]) -> list[Path]:
    """Glob patterns under ROOT, or paths as they are."""
    return [p for d in documents for p in ([d] if isinstance(d, Path) else sorted(ROOT.glob(d)))]


def figures(documents: tuple[str | Path, ...] = DOCUMENTS) -> list[Figure]:
    found = []
    for path in _paths(documents):
        for m in MARKER.finditer(path.read_text()):
            source, *rest = (part.strip() for part in m.group("ref").split("::"))
            if len(rest) < 2:
                raise ValueError(f"{path.name}: a figure needs a file, row cells and a column: {m.group(0)}")
            found.append(Figure(path, source, tuple(rest[:-1]), rest[-1], m.group("value")))
    return found


def differences(documents: tuple[str | Path, ...] = DOCUMENTS) -> list[str]:
    problems = []
    for f in figures(documents):
        try:
            actual = lookup(f.source, f.row, f.column)
        except (LookupError, OSError) as e:
            problems.append(f"{f.document.name}: {e}")
            continue
        if actual != f.quoted:
            where = " :: ".join((f.source, *f.row, f.column))
            problems.append(f"{f.document.name}: quotes {f.quoted!r} for {where}, which is {actual!r}")
    for path in _paths(documents):
        for m in TABLE.finditer(path.read_text()):
            try:
                if table_text(m.group("ref")) != m.group("value"):
                    problems.append(f"{path.name}: the table quoted from {m.group('ref')} differs from it")
            except (LookupError, OSError) as e:
                problems.append(f"{path.name}: {e}")
    return problems


def tables(documents: tuple[str | Path, ...] = DOCUMENTS) -> list[tuple[Path, str]]:
    """(document, source) of every quoted table."""
    return [(path, m.group("ref")) for path in _paths(documents) for m in TABLE.finditer(path.read_text())]


def write(documents: tuple[str | Path, ...] = DOCUMENTS) -> int:
    """Rewrite every marker's value from its source; returns how many changed. A marker whose cell cannot be
    found is left as it is (``differences`` reports it)."""
    changed = 0
    for path in _paths(documents):
        text = path.read_text()

        def value(m: re.Match[str]) -> str:
            nonlocal changed
            source, *rest = (part.strip() for part in m.group("ref").split("::"))
            try:
                actual = lookup(source, tuple(rest[:-1]), rest[-1])
            except (LookupError, OSError):
                return m.group(0)
            changed += actual != m.group("value")
            return f"<!-- fig {m.group('ref')} -->{actual}<!-- /fig -->"

        def table(m: re.Match[str]) -> str:
            nonlocal changed
            try:
                actual = table_text(m.group("ref"))
            except (LookupError, OSError):
                return m.group(0)
            changed += actual != m.group("value")
            return f"<!-- table {m.group('ref')} -->\n{actual}<!-- /table -->"

        new = TABLE.sub(table, MARKER.sub(value, text))
        if new != text:
            path.write_text(new)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m predispatch_views.doc_figures", description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the quoted values from the results files")
    args = parser.parse_args(argv)
    if args.write:
        print(f"{write()} figure(s) rewritten")
    problems = differences()
    print("\n".join(problems) or f"{len(figures())} figures and {len(tables())} tables match their results files")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
