"""The scripts that turn a run's raw output into the results files the docs quote: pytorch_tests_summary.py (one
table from scripts/pytorch_tests.sh's folders) and recheck_fallbacks.py (the fallen-back programs of a fuzz run,
rerun). Each on a tiny synthetic input, checked cell by cell."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUMMARY_FIELDS = ["file", "mode", "strategy", "tests", "passed", "failed", "crashed", "skipped", "missing"]


def _pytorch_run(folder: Path, file: str, mode: str, passed: dict[str, int], prototype_only: int) -> None:
    folder.mkdir(parents=True)
    with (folder / "pytorch_tests_summary.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, SUMMARY_FIELDS)
        writer.writeheader()
        for strategy, count in passed.items():
            writer.writerow({"file": file, "mode": mode, "strategy": strategy, "tests": 10, "passed": count})
    with (folder / "pytorch_tests_prototype_only.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["file", "test", "prototype_outcome"])
        for k in range(prototype_only):
            writer.writerow([file, f"test_{k}", "failed"])
    (folder / "pytorch_tests.md").write_text(f"Command: `compare --pytorch-tests {file}`\n\nEngine: abc1234; torch x\n")


def test_pytorch_tests_summary_writes_one_row_per_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _pytorch_run(
        out / "view_ops", "test/test_view_ops.py", "dynamo-wrapped", {"plain": 9, "stock": 7, "prototype": 8}, 0
    )
    _pytorch_run(out / "aotdispatch", "test/functorch/test_aotdispatch.py", "swapped", {"stock": 6, "prototype": 5}, 2)
    sources = tmp_path / "SOURCES.txt"
    sources.write_text("# path\tid\tcommit\ntest/test_view_ops.py\t1\t9c491bc34c6ab131\t80\n")
    output = tmp_path / "pytorch-tests.md"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pytorch_tests_summary.py"), str(out), "--sources", str(sources),
         "--output", str(output)],
        check=True, capture_output=True,
    )  # fmt: skip
    rows = [line for line in output.read_text().splitlines() if line.startswith("| test/")]
    assert rows == [
        "| test/functorch/test_aotdispatch.py | ? | abc1234 | swapped | 10 | 6 | 6 | 5 | 2 | - |",
        "| test/test_view_ops.py | 9c491bc | abc1234 | dynamo-wrapped | 10 | 9 | 7 | 8 | 0 | - |",
    ]
    assert "Engine: abc1234; torch x" in output.read_text()


def test_recheck_fallbacks_reruns_only_the_fallen_back_programs(tmp_path: Path) -> None:
    """Two programs of seed 0: one recorded as a fallback under the backend, one as a plain match. Only the first
    is rerun; its row counts the transition from what the run recorded to what the engine does now."""
    rows = tmp_path / "fuzz" / "rows_0.jsonl"
    rows.parent.mkdir()
    label, fn = "prototype[aot_eager]", "prototype_fn[aot_eager]"
    recorded = [
        {"index": 0, "eager_forward_runs": True, "strategies": {
            label: {"category": "fallback", "kind": "match", "fallbacks": ["a reason"]},
            fn: {"category": "match", "kind": "match", "fallbacks": []}}},
        {"index": 1, "eager_forward_runs": True, "strategies": {
            label: {"category": "match", "kind": "match", "fallbacks": []},
            fn: {"category": "match", "kind": "match", "fallbacks": []}}},
    ]  # fmt: skip
    rows.write_text("".join(json.dumps(r) + "\n" for r in recorded))
    output = tmp_path / "recheck.md"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "recheck_fallbacks.py"), str(rows.parent), "--output", str(output)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert "[1/1] program 0" in done.stderr
    table = [line for line in output.read_text().splitlines() if line.startswith("| prototype")]
    assert len(table) == 2 and all(line.endswith("| 1 | 0 |") for line in table)
    assert table[0].startswith(f"| {label} | match, fell back | ") and table[1].startswith(f"| {fn} | match | ")
