"""The fallback list in the docs is the code's: generated from predispatch_views/fallbacks.py, and every reason
the code can log is in that list."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from predispatch_views import fallback_docs, fallbacks

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "predispatch_views"
# The modules whose code produces fallback reasons.
REASON_MODULES = (
    "fallback_rules.py",
    "capture.py",
    "function_capture.py",
    "pipeline.py",
    "inner_backend.py",
    "compile_function.py",
)


def test_documents_hold_the_generated_fallback_list() -> None:
    for name, kind in fallback_docs.DOCUMENTS.items():
        blocks = fallback_docs.rendered_blocks((ROOT / name).read_text(), kind)
        assert blocks == [fallback_docs.RENDER[kind]() + "\n"], f"{name}: run python -m predispatch_views.fallback_docs"


def test_every_entry_names_a_message_its_module_produces() -> None:
    for reason in fallbacks.FALLBACK_REASONS:
        assert reason.marker in (PACKAGE / reason.module).read_text(), reason


def _literal(node: ast.expr) -> str | None:
    """A string constant, or an f-string with its fields as {} (implicit concatenation already merged)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


MESSAGE_NAMES = ("reason", "message")


def _reason_literals(tree: ast.Module) -> list[str]:
    """Messages in the places a reason is made: Fallback(...), _fall_back(...), _stock_for(...),
    UnsupportedCapture(...) and compile_function's _eager(...) arguments, ``reason = ...``, ``message = ...``,
    and what a function annotated ``-> str | None`` returns."""
    found = []
    for node in ast.walk(tree):
        candidates: list[ast.expr] = []
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
            "Fallback",
            "_fall_back",
            "_stock_for",
            "UnsupportedCapture",
            "_eager",
        ):
            candidates = list(node.args)
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) in MESSAGE_NAMES for t in node.targets):
            candidates = [node.value]
        elif isinstance(node, ast.FunctionDef) and node.returns and ast.unparse(node.returns) == "str | None":
            candidates = [r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None]
        found += [text for c in candidates if (text := _literal(c)) is not None]
    return found


def test_every_reason_the_code_logs_is_listed() -> None:
    messages = [m for name in REASON_MODULES for m in _reason_literals(ast.parse((PACKAGE / name).read_text()))]
    assert len(messages) >= len(fallbacks.FALLBACK_REASONS)  # the scan finds the sites it is meant to find
    for message in messages:
        matching = [r for r in fallbacks.FALLBACK_REASONS if r.marker in message]
        assert len(matching) == 1, f"{message!r} is not in predispatch_views/fallbacks.py (or is ambiguous)"


def _fallback_kinds_made(tree: ast.Module) -> list[str | None]:
    """The kind each ``Fallback(...)`` call names: ``FallbackKind.NAME`` -> NAME, anything else -> None."""
    kinds = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Fallback":
            first = node.args[0] if node.args else None
            named = isinstance(first, ast.Attribute) and getattr(first.value, "id", None) == "FallbackKind"
            kinds.append(first.attr if named else None)  # type: ignore[union-attr]
    return kinds


def test_every_fallback_names_its_kind_and_every_kind_is_made() -> None:
    # The docs' list is generated from FallbackKind: a kind no code makes is a stale entry, a Fallback without a
    # literal kind could be any entry.
    made: list[str | None] = []
    for path in sorted(PACKAGE.glob("*.py")):
        if path.name != "fallbacks.py":
            made += _fallback_kinds_made(ast.parse(path.read_text()))
    assert None not in made, "a Fallback(...) whose first argument is not FallbackKind.NAME"
    assert set(made) == {kind.name for kind in fallbacks.FallbackKind}


def test_only_the_full_comparison_rewrites_the_committed_results() -> None:
    spec = importlib.util.spec_from_file_location("regenerate_results", ROOT / "scripts" / "regenerate_results.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    committed = ROOT / "design" / "results.md"
    assert script.default_output(False, []) == committed
    assert script.default_output(True, []) == ROOT / "results" / "results-quick.md"
    assert script.default_output(False, ["--cases", "unbind"]) == ROOT / "results" / "results-partial.md"


def _compile_time_ratios() -> dict[tuple[str, str], tuple[str, str]]:
    """(inner, workload) -> (prototype / stock, prototype_capture / stock) medians from design/compile-time.md."""
    ratios, inner, header = {}, None, []
    for line in (ROOT / "design" / "compile-time.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.lstrip("#").strip().startswith("inner backend"):
            inner = line.split("`")[1]
        elif line.startswith("| workload"):
            header = cells
        elif inner and line.startswith("| ") and "**" in line:
            at = {name: cells[header.index(name)] for name in ("prototype / stock", "prototype_capture / stock")}
            ratios[(inner, cells[0])] = (
                at["prototype / stock"].split("**")[1],
                at["prototype_capture / stock"].split("**")[1],
            )
    return ratios


def test_design_05_compile_time_table_is_the_generated_one() -> None:
    """design/05's compile-time table quotes design/compile-time.md (scripts/compile_profile.py): same medians."""
    ratios = _compile_time_ratios()
    assert {w for _, w in ratios} >= {"deep_mlp", "seed", "qkv", "kjt", "layers", "single_view"}
    text = (ROOT / "design" / "05-cost-and-dynamic-shapes.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and " / " in line and "(" in line]
    checked = 0
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        workload = cells[0].split(" ")[0]
        if ("aot_eager", workload) not in ratios or len(cells) != 4:
            continue
        captured = cells[3].split(" / ")
        assert cells[1].split(" ")[0] == ratios[("aot_eager", workload)][0], row
        assert cells[2].split(" ")[0] == ratios[("inductor", workload)][0], row
        assert captured == [ratios[("aot_eager", workload)][1], ratios[("inductor", workload)][1]], row
        checked += 1
    assert checked == 6


def test_design_06_line_counts_are_the_scripts() -> None:
    """design/06 § Lines gained and lost quotes scripts/upstream_lines.py on this checkout and torch."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "upstream_lines.py")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    counts = {line.split(":")[0].lstrip("- "): int(re.findall(r": (\d+)", line)[0]) for line in done.stdout.splitlines()
              if line.startswith("- ") and re.search(r": \d+", line)}  # fmt: skip
    text = (ROOT / "design" / "06-landing.md").read_text()
    section = text[text.index("## Lines gained and lost") : text.index("## Open questions")]
    flat = " ".join(section.split()).replace(",", "")
    expected = {
        "functional_utils.gen_alias_from_base": "`gen_alias_from_base` {}",
        "runtime_wrappers.AliasOfIntermediateHandler": "`AliasOfIntermediateHandler` {}",
        "runtime_wrappers.AliasOfInputHandler": "`AliasOfInputHandler` {}",
        "whole definitions above": "{} lines)",
        "capture (slice of Dynamo's graph, pre-dispatch trace)": "capture {}:",
        "selection (graph record, fallback rules, op facts)": "selection {}:",
        "slicing and segments": "slicing and segments {};",
        "runtime (epilogue codegen)": "code generation {})",
        "diagnostic only (explain's functional graph)": "{}-line diagnostic",
        "total, diagnostic excluded": "prototype's form: {} lines",
    }
    for key, pattern in expected.items():
        assert pattern.format(counts[key]) in flat, (key, counts[key])
    mentions = next(line for line in done.stdout.splitlines() if "mentioning" in line)
    (mentioned,) = re.findall(r": (\d+) \(of", mentions)
    assert f"({mentioned} lines of" in flat
