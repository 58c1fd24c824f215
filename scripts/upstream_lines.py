"""How many lines upstream would gain and lose (design/06 § Lines gained and lost).

Usage (from the repository root)::

    python scripts/upstream_lines.py --output results/upstream-lines.md

Lost: the installed torch's AOTAutograd code that view replay makes unnecessary once it is the default
(design/06 § What can be deleted): the whole functions and classes named there, and, as an indicator of the rest,
the lines of torch/_functorch/_aot_autograd that mention the output-alias concepts those paths carry. Gained: the
code lines (not blank, not comments or docstrings) of the prototype's engine modules, by the upstream stage they
would become. Both are counts of source lines, not a patch: the gained side includes the prototype's fallback
rules that upstream would express over AOTAutograd's own metadata, and its own private-API shims.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import sys
import textwrap
from pathlib import Path

import torch
import torch._dynamo  # imported first: runtime_wrappers imports from it in the order torch expects

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from predispatch_views.compare.timing import provenance, write_results  # noqa: E402

# Whole definitions that go (design/06 § What can be deleted).
DELETED = [
    ("torch._functorch._aot_autograd.functional_utils", "gen_alias_from_base"),
    ("torch._functorch._aot_autograd.runtime_wrappers", "AliasOfIntermediateHandler"),
    ("torch._functorch._aot_autograd.runtime_wrappers", "AliasOfInputHandler"),
]
# Lines that carry the output-alias classification and regeneration (an indicator of the scattered rest).
CONCEPTS = ("alias_of_intermediate", "intermediate_base", "multi_output_view", "alias_of_input", "is_multi_output_view")
# The prototype's engine modules by the upstream stage they would become (design/06 § Stages that change).
STAGES = {
    "capture (slice of Dynamo's graph, pre-dispatch trace)": [
        "dynamo_slice.py",
        "capture.py",
        "capture_cache.py",
        "function_capture.py",
    ],
    "selection (graph record, fallback rules, op facts)": [
        "graph_meta.py",
        "analysis.py",
        "fallback_rules.py",
        "output_rules.py",
        "graph_break_rules.py",
        "graph_ops.py",
        "fallbacks.py",
        "saved_value_rules.py",
        "storage_rules.py",
        "function_rules.py",
    ],
    "slicing and segments": [
        "slicing.py",
        "saved_aliases.py",
        "segments.py",
        "segment_savers.py",
        "crossing_values.py",
        "segment_runtime.py",
    ],
    "runtime (epilogue codegen, checks per call)": ["runtime.py", "version_watches.py", "stock_views.py"],
    "pipeline (stage order, inner backend, fallback to stock)": ["pipeline.py", "inner_backend.py"],
    "diagnostic only (explain's functional graph)": ["functionalize.py"],
}


def code_lines(source: str) -> int:
    """Lines holding code: not blank, not a comment, not inside a docstring."""
    tree = ast.parse(source)
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return sum(
        1
        for i, line in enumerate(source.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and i not in docstrings
    )


def tables() -> list[str]:
    """The counts as Markdown tables (design/06 quotes them through doc_figures)."""
    lines = [
        "## Lost",
        "",
        "The installed torch's AOTAutograd code that view replay makes unnecessary (design/06 § What can be deleted).",
        "",
        "| what | code lines |",
        "|---|---:|",
    ]
    lost = 0
    for module, name in DELETED:
        n = code_lines(textwrap.dedent(inspect.getsource(getattr(importlib.import_module(module), name))))
        lost += n
        lines.append(f"| {module.rsplit('.', 1)[1]}.{name} | {n} |")
    package = Path(torch.__file__).parent / "_functorch" / "_aot_autograd"
    total = mentions = 0
    for path in sorted(package.glob("*.py")):
        text = path.read_text()
        total += code_lines(text)
        mentions += sum(1 for line in text.splitlines() if any(c in line for c in CONCEPTS))
    lines.append(f"| whole definitions above | {lost} |")
    lines.append(f"| lines of _aot_autograd/*.py mentioning {', '.join(CONCEPTS)} | {mentions} |")
    lines.append(f"| code lines of _aot_autograd/*.py | {total} |")
    lines += ["", "## Gained", "", "The prototype's engine, by upstream stage.", ""]
    lines += ["| stage | code lines | modules |", "|---|---:|---|"]
    gained = 0
    for stage, modules in STAGES.items():
        n = sum(code_lines((ROOT / "predispatch_views" / m).read_text()) for m in modules)
        if "diagnostic" not in stage:
            gained += n
        lines.append(f"| {stage} | {n} | {', '.join(modules)} |")
    lines.append(f"| total, diagnostic excluded | {gained} | |")
    counted = {m for modules in STAGES.values() for m in modules}
    rest = sorted(p.name for p in (ROOT / "predispatch_views").glob("*.py") if p.name not in counted)
    what = "entry points, the comparison's reports, torch shims, infrastructure"
    lines += ["", f"Not counted ({what}): {', '.join(rest)}."]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None, help="write the Markdown here (results/...)")
    args = parser.parse_args()
    command = "python scripts/upstream_lines.py " + " ".join(sys.argv[1:])
    write_results(["# Lines gained and lost", "", provenance(command.strip()), "", *tables()], args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
