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
    "graph_ops.py": ("_READS_RESULT", "backward_reads_its_result"),
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


def code_size() -> None:
    total = sum(len(p.read_text().splitlines()) for p in sorted(ENGINE.glob("*.py")))
    print("## Code v1 would not need (predispatch_views/, lines)\n")
    not_needed = 0
    for module, names in V1_WOULD_NOT_NEED.items():
        source = (ENGINE / module).read_text()
        if names == ("*",):
            count = len(source.splitlines())
            print(f"- {module}: all {count} lines")
        else:
            defined = _definitions(ast.parse(source))
            missing = [n for n in names if n not in defined]
            if missing:
                raise SystemExit(f"{module}: not found: {', '.join(missing)}")
            count = sum(_lines(defined[n]) for n in names)
            print(f"- {module}: {count} lines ({', '.join(names)})")
        not_needed += count
    from predispatch_views.fallbacks import FallbackKind

    kinds = [k for k in V1_WOULD_NOT_NEED_KINDS if k in FallbackKind.__members__]
    print(f"\nTotal: {not_needed} of {total} lines of predispatch_views/*.py ({100 * not_needed / total:.0f}%).")
    print(f"Fallback kinds only a replayed mutation raises: {len(kinds)} of {len(FallbackKind)}.\n")


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


def fuzz_programs(seed: int, count: int, csv_path: Path | None) -> None:
    from predispatch_views.compare.fuzz_program import DIMENSIONS, generate

    dimensions = frozenset(DIMENSIONS)
    flagged = {i for i in range(count) if replays_a_mutation(generate(seed, i, dimensions))}
    print(f"## Fuzz programs, seed {seed}, all dimensions\n")
    print(f"Programs whose epilogue would hold a mutation (v1 falls back): {len(flagged)} of {count}.")
    if csv_path is None:
        return
    rows: dict[tuple[int, str], dict[str, str]] = {}
    with csv_path.open() as f:
        for row in csv.DictReader(f):
            if match := re.match(rf"fuzz_s{seed}_(\d+)", row["program"]):
                rows[(int(match.group(1)), row["strategy"])] = row

    def matches(row: dict[str, str]) -> bool:
        return row["category"] == "match" or (row["category"] == "fallback" and row["outcome"] == "match")

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
    lost = present - v1
    mutation_reasons = (
        "mutated its base",
        "an alias taken before",
        "writes afterwards",
        "replayed in eager",
        "draws random numbers",
        "may save it",
        "which compiled autograd (on) rejects",
    )
    unflagged = sorted(
        i for i in fell_back - flagged if any(r in rows[(i, backend)]["fallback"] for r in mutation_reasons)
    )

    def gap(matched: set[int]) -> str:
        closed = (len(matched) - len(stock_matches)) / max(1, len(ceiling_matches) - len(stock_matches))
        return f"{100 * closed:.0f}%"

    print(f"\nOver the {len(ran)} programs whose eager forward runs ({csv_path.name}, default setting):")
    print(f"- stock matches {len(stock_matches)}, the ceiling {len(ceiling_matches)};")
    print(
        f"- the backend: matches {len(present)}, falls back on {len(fell_back)} "
        f"({100 * len(fell_back) / len(ran):.0f}%), gap closed {gap(present)};"
    )
    print(
        f"- with a mutation in the epilogue: {len(flagged & set(ran))}; of those the backend fell back on "
        f"{len(flagged & fell_back)}, replayed and matched {len(replayed_and_matched)}, stock matched "
        f"{len(replayed_and_matched & stock_matches)} of these;"
    )
    v1_fallbacks = fell_back | (flagged & set(ran))
    print(
        f"- v1: falls back on {len(v1_fallbacks)} ({100 * len(v1_fallbacks) / len(ran):.0f}%), matches {len(v1)}, "
        f"gap closed {gap(v1)}; programs it loses: {', '.join(f'{seed}_{i}' for i in sorted(lost)) or 'none'}."
    )
    print(f"- check: backend fallbacks for a mutation rule on programs not flagged here: {unflagged or 'none'}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=901)
    parser.add_argument("--programs", type=int, default=120)
    parser.add_argument("--csv", type=Path, default=None, help="compare --fuzz's fuzz.csv for the same seed")
    args = parser.parse_args()
    code_size()
    fuzz_programs(args.seed, args.programs, args.csv)


if __name__ == "__main__":
    main()
