"""Figures for design/04's weighing of a simpler v1 (issue 25): no compiling, no tracing, a few seconds.

Usage (from the repository root)::

    python scripts/soundness_coverage.py [--seed 901] [--programs 120] [--csv PATH/fuzz.csv]

The v1 weighed there replays only views: wherever the present selection (Note [Which nodes the epilogue replays]
in predispatch_views/analysis.py) pulls a mutation into the epilogue (rule 2: a write through a replayed view, a
metadata mutation feeding one; rule 3: a write to a base after a replayed view of it), v1 falls back, and it has
no segments. Two figures:

1. Code size: the lines of the engine that exist only to replay mutations or to cut programs into segments,
   counted per function with ``ast`` (listed in ``V1_WOULD_NOT_NEED``), against the engine's total.
2. Fuzz programs: which of the fuzzer's programs ``generate(seed, i, all dimensions)`` (the programs of
   ``compare --fuzz N --seed S``, default dimensions) hold such a mutation, read from the program's statements
   (their kinds and names, no trace: an estimate; graph breaks are ignored). With ``--csv`` (the fuzz.csv that
   ``compare --fuzz`` writes for the same seed), how each of them fared under the backend and under stock, and
   what v1 would have given: stock's result wherever the backend replayed a mutation.
"""

from __future__ import annotations

import argparse
import ast
import csv
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from predispatch_views.compare.timing import provenance  # noqa: E402

ENGINE = ROOT / "predispatch_views"

# module -> the top-level functions (or "*" for the whole module, "Name.inner" for a nested function, a string
# constant's name for a table) that only replaying mutations or cutting into segments needs.
V1_WOULD_NOT_NEED: dict[str, tuple[str, ...]] = {
    "segments.py": ("*",),
    "fallback_rules.py": (
        "replay_order",
        "core_reads_a_replayed_mutation",
        "unreplayable_mutation",
        "_saves_its_result_and_is_read_after",
        "may_save",
        "view_fn_write_under_compiled_autograd",
        "_VIEW_FN_VIEWS",
    ),
    "analysis.py": ("_tainted", "_select.recomputable"),
    "graph_ops.py": ("backward_reads_its_result",),
}
# Fallback kinds (predispatch_views/fallbacks.py) that only a replayed mutation can raise.
V1_WOULD_NOT_NEED_KINDS = (
    "READ_AFTER_UNRECOMPUTABLE_MUTATION",
    "READ_OF_ALIAS_TAKEN_BEFORE_MUTATION",
    "REPLAYED_COPY_BEFORE_CORE_WRITE",
    "CORE_READS_REPLAYED_MUTATION",
    "RANDOM_MUTATION_AFTER_VIEWS",
    "WRITE_TO_A_BASE_THE_CORE_MAY_SAVE",
    "VIEW_FN_WRITE_UNDER_COMPILED_AUTOGRAD",
)


def _lines(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1  # type: ignore[attr-defined, operator]


def _definitions(tree: ast.Module) -> dict[str, ast.AST]:
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            found[node.name] = node
            for inner in ast.walk(node):
                if isinstance(inner, ast.FunctionDef) and inner is not node:
                    found[f"{node.name}.{inner.name}"] = inner
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node
    return found


def code_size() -> list[str]:
    """The table of the engine's code v1 would not need."""
    total = sum(len(p.read_text().splitlines()) for p in sorted(ENGINE.glob("*.py")))
    lines = ["## Code v1 would not need", "", "| module | lines | definitions |", "|---|---:|---|"]
    not_needed = 0
    for module, names in V1_WOULD_NOT_NEED.items():
        source = (ENGINE / module).read_text()
        if names == ("*",):
            count = len(source.splitlines())
            lines.append(f"| {module} | {count} | all |")
        else:
            defined = _definitions(ast.parse(source))
            missing = [n for n in names if n not in defined]
            if missing:
                raise SystemExit(f"{module}: not found: {', '.join(missing)}")
            count = sum(_lines(defined[n]) for n in names)
            lines.append(f"| {module} | {count} | {', '.join(f'`{n}`' for n in names)} |")
        not_needed += count
    from predispatch_views.fallbacks import FallbackKind

    kinds = [k for k in V1_WOULD_NOT_NEED_KINDS if k in FallbackKind.__members__]
    lines.append(f"| all | {not_needed} of {total} ({100 * not_needed / total:.0f}%) | predispatch_views/*.py |")
    lines += ["", f"Fallback kinds only a replayed mutation raises: {len(kinds)} of {len(FallbackKind)}.", ""]
    return lines


# Statement kinds of compare/fuzz_program.py.
ALIAS_KINDS = {"view", "multi-output view", "alias-returning op", "detach", "view of a list input", "None input"}
NOT_REPLAYED_ALIASES = {"None input", "custom Function"}  # no view call in the trace (identity, a Function node)
MUTATION_KINDS = {
    "mutation",
    "mutation under no_grad",
    "metadata mutation",
    "mutation of detached",
    "random in-place",
    "mutation of a list input",
}


def _is_alias(stmt: Any) -> bool:
    kind, code = stmt.kind, stmt.code
    if kind in ALIAS_KINDS:
        return True
    if kind == "int input":
        return "[:" in code or ".select(" in code
    return kind == "custom Function" and "ScaledClone" not in code


def _mutated(stmt: Any) -> str | None:
    kind, code, uses = stmt.kind, stmt.code, stmt.uses
    if kind in MUTATION_KINDS or (kind == "custom Function" and "MarkDirty" in code):
        return uses[0]
    if kind.startswith("out= call into"):
        match = re.search(r"out=(\w+(?:\[\d+\])?)", code)
        return match.group(1) if match else None
    return None


def replays_a_mutation(program: Any) -> bool:
    """Whether the present selection would pull a mutation into the epilogue (rules 2 and 3), read off the
    statements: a mutation of a base after a replayed view of it (a write through a replayed view is one), or a
    metadata mutation of a value a replayed view is later taken of."""
    root: dict[str, str] = {}
    for line in program.input_code:
        if match := re.match(r"(\w+), (\w+) = (\w+)_source\[", line.strip()):
            root[match.group(2)] = match.group(1)  # aliased inputs: one base
    body = program.body
    for stmt in body:
        if _is_alias(stmt) and stmt.uses:
            for name in stmt.defines:
                root[name] = root.get(stmt.uses[0], stmt.uses[0])
    reach = set(program.outputs)
    replayed: list[int] = []  # the statements rule 1 replays: views whose results reach an output through views
    for index in range(len(body) - 1, -1, -1):
        stmt = body[index]
        if _is_alias(stmt) and stmt.kind not in NOT_REPLAYED_ALIASES and reach & set(stmt.defines):
            replayed.append(index)
            reach.add(stmt.uses[0])
    for index, stmt in enumerate(body):
        target = _mutated(stmt)
        if target is None:
            continue
        base = root.get(target, target)
        for v in replayed:
            source = body[v].uses[0]
            if v < index and root.get(body[v].defines[0], source) == base:
                return True  # rule 3 (and rule 2: a write through a replayed view)
            if v > index and stmt.kind == "metadata mutation" and source == target:
                return True  # rule 2: a metadata mutation feeding a replayed view
    return False


FUZZ_COLUMNS = (
    "seed",
    "programs",
    "v1 falls back (flagged)",
    "eager forward runs",
    "stock matches",
    "ceiling matches",
    "backend matches",
    "backend fallbacks",
    "backend gap closed",
    "flagged, forward runs",
    "backend fell back on them",
    "replayed and matched",
    "of which stock matches",
    "v1 matches",
    "v1 fallbacks",
    "v1 gap closed",
    "v1 loses",
)


def fuzz_programs(seed: int, count: int, csv_path: Path | None) -> tuple[dict[str, str], list[str]]:
    """One row of FUZZ_COLUMNS for ``seed`` (the columns after the third need ``csv_path``), and the programs v1
    loses."""
    from predispatch_views.compare.fuzz_program import DIMENSIONS, generate

    dimensions = frozenset(DIMENSIONS)
    flagged = {i for i in range(count) if replays_a_mutation(generate(seed, i, dimensions))}
    row = dict.fromkeys(FUZZ_COLUMNS, "-") | {"seed": str(seed), "programs": str(count)}
    row["v1 falls back (flagged)"] = str(len(flagged))
    if csv_path is None:
        return row, []
    rows: dict[tuple[int, str], dict[str, str]] = {}
    with csv_path.open() as f:
        for record in csv.DictReader(f):
            if match := re.fullmatch(rf"fuzz_s{seed}_(\d+)(_\w+)?", record["program"]):
                rows[(int(match.group(1)), record["strategy"])] = record

    def matches(record: dict[str, str]) -> bool:
        return record["category"] == "match" or (record["category"] == "fallback" and record["outcome"] == "match")

    backend, stock, ceiling = "prototype[aot_eager]", "stock[aot_eager]", "dynamo_eager[eager]"
    ran = [
        i
        for i in range(count)
        if all((i, s) in rows for s in (backend, stock, ceiling)) and rows[(i, backend)]["eager_forward_runs"] == "1"
    ]
    fell_back = {i for i in ran if rows[(i, backend)]["category"] == "fallback"}
    present = {i for i in ran if matches(rows[(i, backend)])}
    stock_matches = {i for i in ran if matches(rows[(i, stock)])}
    ceiling_matches = {i for i in ran if matches(rows[(i, ceiling)])}
    replayed = (flagged & set(ran)) - fell_back  # v1 hands these to stock: stock's result
    replayed_and_matched = replayed & present
    v1 = {i for i in ran if matches(rows[(i, stock if i in replayed else backend)])}
    v1_fallbacks = fell_back | (flagged & set(ran))

    def gap(matched: set[int]) -> str:
        closed = (len(matched) - len(stock_matches)) / max(1, len(ceiling_matches) - len(stock_matches))
        return f"{100 * closed:.0f}%"

    def share(found: set[int]) -> str:
        return f"{len(found)} ({100 * len(found) / max(1, len(ran)):.0f}%)"

    row |= {
        "eager forward runs": str(len(ran)),
        "stock matches": str(len(stock_matches)),
        "ceiling matches": str(len(ceiling_matches)),
        "backend matches": str(len(present)),
        "backend fallbacks": share(fell_back),
        "backend gap closed": gap(present),
        "flagged, forward runs": str(len(flagged & set(ran))),
        "backend fell back on them": str(len(flagged & fell_back)),
        "replayed and matched": str(len(replayed_and_matched)),
        "of which stock matches": str(len(replayed_and_matched & stock_matches)),
        "v1 matches": str(len(v1)),
        "v1 fallbacks": share(v1_fallbacks),
        "v1 gap closed": gap(v1),
        "v1 loses": str(len(present - v1)),
    }
    return row, [f"s{seed}_{i}" for i in sorted(present - v1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", default="901", help="one seed, or several, comma separated")
    parser.add_argument("--programs", type=int, default=120, help="programs per seed")
    parser.add_argument("--csv", type=Path, default=None, help="compare --fuzz's fuzz.csv for the same seeds")
    parser.add_argument("--output", type=Path, default=None, help="write the Markdown here (results/...)")
    args = parser.parse_args()
    command = "python scripts/soundness_coverage.py " + " ".join(
        a if args.csv is None or a != str(args.csv) else args.csv.name for a in sys.argv[1:]
    )
    lines = ["# What a simpler v1 would save and lose", "", provenance(command), "", *code_size()]
    lines += [
        "## Fuzz programs",
        "",
        "Per seed (all dimensions, the default setting's outcomes from the fuzz.csv of `compare --fuzz`): "
        "`v1 falls back (flagged)`: programs whose epilogue would hold a mutation, read off the statements (no "
        "trace: an estimate); the rest count the programs whose eager forward runs. v1 gives stock's result "
        "wherever the backend replayed a mutation.",
        "",
        "| " + " | ".join(FUZZ_COLUMNS) + " |",
        "|" + "---:|" * len(FUZZ_COLUMNS),
    ]
    lost: list[str] = []
    for seed in (int(x) for x in args.seed.split(",")):
        row, lost_here = fuzz_programs(seed, args.programs, args.csv)
        lines.append("| " + " | ".join(row[c] for c in FUZZ_COLUMNS) + " |")
        lost += lost_here
    lines += ["", f"Programs v1 loses (the backend matches eager, v1 would not): {', '.join(lost) or 'none'}.", ""]
    text = "\n".join(lines)
    if args.output is not None:
        args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
