"""The fallback list in the docs is the code's: generated from predispatch_views/fallbacks.py, and every reason
the code can log is in that list."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from predispatch_views import doc_figures, fallback_docs, fallbacks

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "predispatch_views"
# The modules whose code produces fallback reasons.
REASON_MODULES = (
    "fallback_rules.py",
    "output_rules.py",
    "graph_break_rules.py",
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
    """Messages in the places a reason is made: Fallback(...), fall_back_to_stock(...), stock_for(...),
    UnsupportedCapture(...) and compile_function's _eager(...) arguments, ``reason = ...``, ``message = ...``,
    and what a function annotated ``-> str | None`` returns."""
    found = []
    for node in ast.walk(tree):
        candidates: list[ast.expr] = []
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
            "Fallback",
            "fall_back_to_stock",
            "stock_for",
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
    # The scan finds the sites it is meant to find: every reason made in a scanned module has one.
    scanned = [r for r in fallbacks.FALLBACK_REASONS if r.module in REASON_MODULES]
    assert len(scanned) > 30
    assert not [r.marker for r in scanned if not any(r.marker in m for m in messages)]
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


def _regenerate_results_script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("regenerate_results", ROOT / "scripts" / "regenerate_results.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_only_the_full_comparison_rewrites_the_committed_results() -> None:
    script = _regenerate_results_script()
    committed = ROOT / "design" / "results.md"
    assert script.default_output(False, []) == committed
    assert script.default_output(True, []) == ROOT / "results" / "results-quick.md"
    assert script.default_output(False, ["--cases", "unbind"]) == ROOT / "results" / "results-partial.md"


def test_design_06_line_counts_are_the_scripts(tmp_path: Path) -> None:
    """design/06 § Lines gained and lost quotes results/upstream-lines.md (doc_figures checks the quotes); the file
    is what scripts/upstream_lines.py counts on this checkout, for the torch it names."""
    committed = (ROOT / "results" / "upstream-lines.md").read_text()
    if f"torch {torch.__version__}" not in committed.splitlines()[2]:
        pytest.skip(f"the file counts another torch's AOTAutograd sources than {torch.__version__}'s")
    output = tmp_path / "upstream-lines.md"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "upstream_lines.py"), "--output", str(output)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    fresh = output.read_text().splitlines()
    # The provenance line names the commit and the load; the counts below it must be the same.
    assert fresh[3:] == committed.splitlines()[3:], "results/upstream-lines.md is stale: rerun the script"


def test_the_detail_sections_move_out_of_results_md() -> None:
    script = _regenerate_results_script()
    text = (
        "# Results\n\nnote\n\n_Generated by x._\n\n## Parity with eager\n\nsummary\n\n### Prototype fallbacks\n\n"
        "- case a: reason\n\n### Per case\n\n| a | 10/10 |\n\n## Performance\n\n| perf |\n\n## Real models\n\n"
        "| m | ok |\n\n### Every strategy\n\n| m | eager |\n"
    )
    kept, moved = script.split_details(text)
    assert "summary" in kept and "| perf |" in kept and "| m | ok |" in kept
    assert "reason" not in kept and "| a | 10/10 |" not in kept and "| m | eager |" not in kept
    assert kept.count("_Moved to [results/parity-details.md](../results/parity-details.md)") == 2
    assert kept.count("_Moved to [results/models-details.md](../results/models-details.md)") == 1
    parity, models = (moved[ROOT / "results" / name] for name in ("parity-details.md", "models-details.md"))
    assert "- case a: reason" in parity and "| a | 10/10 |" in parity and "| perf |" not in parity
    assert "| m | eager |" in models and "| m | ok |" not in models
    assert script.split_details(kept) == (kept, {})  # split already: nothing moves again


def test_design_holds_no_generated_file_over_50_kb() -> None:
    """Issue 25: generated logs live in results/; design/ keeps summaries."""
    for path in sorted((ROOT / "design").glob("*.md")):
        text = path.read_text()
        if "do not edit" in text[:400].lower():
            assert len(text.encode()) <= 50_000, f"{path.name}: {len(text.encode())} bytes"


def test_every_quoted_figure_is_its_results_cell() -> None:
    """Issue 25: README.md and design/*.md quote results through doc_figures markers; none may go stale."""
    assert doc_figures.differences() == []
    assert len(doc_figures.figures()) >= 20


# Ratios and counts written in prose without a marker, each with why it is not a measured figure.
_UNQUOTED_ALLOWED = {
    ("README.md", "0/0"): "a graph label (`graph 0/0`) in a log line",
    ("design/01-problem.md", "100x"): "the seed's data grows with N squared: a fact of the program, not a measure",
    ("design/05-cost-and-dynamic-shapes.md", "5%"): "issue 24's bound",
    ("design/05-cost-and-dynamic-shapes.md", "1.05x"): "issue 24's target",
    ("design/05-cost-and-dynamic-shapes.md", "0.5x"): "issue 24's target",
    ("design/05-cost-and-dynamic-shapes.md", "2%"): "prose bound around the marker it follows (deberta's ratio)",
    ("design/05-cost-and-dynamic-shapes.md", "1.0x"): "a goal, not a measure",
}
_RATIO_OR_COUNT = re.compile(r"(?<![\w.])\d+(?:\.\d+)?%|(?<![\w.:])\d+ ?/ ?\d+(?![\w.])|(?<![\w.])\d+(?:\.\d+)?x(?!\w)")


def test_no_ratio_or_count_is_entered_by_hand() -> None:
    """Issue 25: a percentage, an ``a/b`` count or an ``Nx`` ratio in README.md or design/*.md is a doc_figures
    marker (or a quoted table), so it cannot go stale; hand-entered history lives in results/finds-log.md. The
    generated files (results.md, compile-time.md) are exempt, and so are the few allowed above."""
    marker = re.compile(r"(?<!`)<!-- fig .*? -->.*?<!-- /fig -->", re.DOTALL)
    table = re.compile(r"^<!-- table .*? -->\n(?:\|.*\n)*<!-- /table -->$", re.MULTILINE)
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "design").glob("*.md"))]:
        text = path.read_text()
        if "do not edit" in text[:400].lower():
            continue
        name = path.relative_to(ROOT).as_posix()
        prose = table.sub("", marker.sub("<figure>", text))
        found += [(name, hit) for hit in _RATIO_OR_COUNT.findall(prose) if (name, hit) not in _UNQUOTED_ALLOWED]
    assert found == []


def test_a_stale_figure_is_caught_and_rewritten(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    ref = "design/compile-time.md#aot_eager :: deep_mlp :: prototype / stock"
    actual = doc_figures.lookup("design/compile-time.md#aot_eager", ("deep_mlp",), "prototype / stock")
    doc.write_text(f"deep_mlp compiles in <!-- fig {ref} -->9.99<!-- /fig -->x stock's time.\n")
    (problem,) = doc_figures.differences((doc,))
    assert "quotes '9.99'" in problem and repr(actual) in problem
    assert doc_figures.write((doc,)) == 1
    assert doc_figures.differences((doc,)) == [] and f"-->{actual}<!--" in doc.read_text()
    doc.write_text(f"the syntax: `<!-- fig {ref} -->value<!-- /fig -->`\n")  # shown as code: no figure
    assert doc_figures.figures((doc,)) == []
    doc.write_text(f"<!-- fig {ref.replace('#aot_eager', '')} -->1<!-- /fig -->\n")  # two tables match: ambiguous
    (problem,) = doc_figures.differences((doc,))
    assert "2 rows start with deep_mlp" in problem


def test_a_stale_table_is_caught_and_rewritten(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    source = "results/fuzz-history.md#Every run"
    actual = doc_figures.table_text(source)
    stale = actual.replace("| 905 |", "| 906 |")
    assert stale != actual
    doc.write_text(f"Runs:\n\n<!-- table {source} -->\n{stale}<!-- /table -->\n\nmore text\n")
    (problem,) = doc_figures.differences((doc,))
    assert "differs from it" in problem
    assert doc_figures.write((doc,)) == 1
    assert (
        doc_figures.differences((doc,)) == [] and actual in doc.read_text() and doc.read_text().endswith("more text\n")
    )
    doc.write_text("<!-- table results/fuzz-results.md#Differential fuzzing -->\n<!-- /table -->\n")  # many tables
    (problem,) = doc_figures.differences((doc,))
    assert "tables under a heading" in problem


def test_the_fuzz_history_is_generated_from_the_fuzz_results() -> None:
    """results/fuzz-history.md (design/04 quotes it) is rendered from results/fuzz-results.md."""
    from predispatch_views.compare import fuzz_history

    assert fuzz_history.TARGET.read_text() == fuzz_history.render(fuzz_history.SOURCE.read_text())
    runs = fuzz_history.runs(fuzz_history.SOURCE.read_text())
    assert len(runs) >= 10 and all(run.rows and run.engine != "?" for run in runs)


def test_links_in_the_docs_reach_committed_files() -> None:
    """A link (or a figure's source) in README.md or design/*.md names a file a fresh clone has: results/ is mostly
    ignored, and a quoted file that was never committed fails only in CI's clone."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    committed = set(tracked.stdout.split()) if tracked.returncode == 0 else None
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "design").glob("*.md"))]:
        text = doc.read_text()
        targets = [m.group(1) for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if "://" not in m.group(1)]
        paths = [(doc.parent / t).resolve() for t in targets]
        paths += [(ROOT / f.source.partition("#")[0]).resolve() for f in doc_figures.figures((doc,))]
        paths += [(ROOT / source.partition("#")[0].strip()).resolve() for _, source in doc_figures.tables((doc,))]
        for path in paths:
            relative = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
            if not path.exists() or (committed is not None and path.is_file() and relative not in committed):
                missing.append(f"{doc.name}: {relative}")
    assert missing == []
