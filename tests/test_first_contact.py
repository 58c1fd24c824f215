"""What a new user meets first: compare and explain on bad input, tables only from runs where eager ran, and
fallback entries that say which function fell back.

The command-line checks run in one fresh interpreter (``python -m predispatch_views`` as a user runs it, each
command through ``main``), the rest in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import predispatch_views as pv
from predispatch_views.compare import benchmarks, parity, report
from predispatch_views.compare.cases import Case, T
from predispatch_views.compare.main import run_compare
from predispatch_views.compare.strategies import eager, prototype, stock
from predispatch_views.labels import function_label

ROOT = Path(__file__).resolve().parent.parent

RUNNER = """
import contextlib, io, json, sys
from predispatch_views.__main__ import main

results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    results.append({"rc": rc, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(results))
"""


def run_commands(commands: list[list[str]]) -> list[dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("PREDISPATCH_VIEWS", None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RUNNER), json.dumps(commands)],
        env=env, capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def one_line(text: object) -> str:
    lines = str(text).strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in str(text), text
    return lines[0]


def test_command_line_errors_and_exit_codes(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    fresh = tmp_path / "fresh"
    commands = {
        "inner": ["compare", "--inner", "aot_eagr", "--out", str(fresh)],
        "cuda": ["compare", "--device", "cuda", "--out", str(fresh)],
        "cases": ["compare", "--cases", "nosuchcase", "--out", str(fresh)],
        "out": ["compare", "--out", str(not_a_folder / "sub")],
        "help": ["compare", "--help"],
        "raises": ["explain", "tests.cli_programs:raises", "--args", "randn(3, 4)"],
        "module": ["explain", "no_such_module:f"],
        "function": ["explain", "tests.cli_programs:no_such_function"],
        "not_callable": ["explain", "tests.cli_programs:NOT_A_FUNCTION"],
        "bad_args": ["explain", "tests.cli_programs:raises", "--args", "randn(3,"],
        "bad_kwargs": ["explain", "tests.cli_programs:split_along", "--args", "randn(2, 3)", "--kwargs", "dim=nope"],
        "kwargs": [
            "explain", "tests.cli_programs:split_along", "--args", "randn(2, 3, requires_grad=True)",
            "--kwargs", "dim=1, scale=2.0",
        ],
    }
    results = dict(zip(commands, run_commands(list(commands.values()))))

    assert results["inner"]["rc"] == 2 and "unknown inner backend 'aot_eagr'" in one_line(results["inner"]["err"])
    assert not fresh.exists()  # nothing written, nothing measured
    if not torch.cuda.is_available():
        assert results["cuda"]["rc"] == 2 and "CUDA is not available" in one_line(results["cuda"]["err"])
    assert results["cases"]["rc"] == 2 and "'nosuchcase' matches no case" in one_line(results["cases"]["err"])
    assert results["out"]["rc"] == 2 and "not a writable folder" in one_line(results["out"]["err"])
    help_text = " ".join(str(results["help"]["out"]).split())
    assert results["help"]["rc"] == 0 and "--device DEVICE cpu or cuda (default: cpu)" in help_text
    assert "--out OUT folder for the Markdown, CSV and PNG outputs (default: results)" in help_text

    raised = results["raises"]
    assert raised["rc"] == 1
    assert "the program raises under eager: RuntimeError: shape '[7, -1]' is invalid" in raised["err"]
    report_text = str(raised["out"])
    fallbacks = report_text.split("fallback reasons ==\n")[1].split("\n\n")[0]
    assert fallbacks == "none"  # the error is not filed as a fallback reason
    assert "== 8. errors ==\nthe program raises under eager: RuntimeError" in report_text

    for name, message in {
        "module": "cannot import module 'no_such_module'",
        "function": "no attribute 'no_such_function'",
        "not_callable": "tests.cli_programs:NOT_A_FUNCTION is a int, not a function",
        "bad_args": "--args 'randn(3,': SyntaxError",
        "bad_kwargs": "--kwargs 'dim=nope': NameError",
    }.items():
        assert results[name]["rc"] == 2 and message in one_line(results[name]["err"]), results[name]

    kwargs = results["kwargs"]
    assert kwargs["rc"] == 0, kwargs["err"]
    summary = str(kwargs["out"]).split("AccumulateGrad excluded) ==\n")[1].splitlines()
    eager_line = next(line for line in summary if line.startswith("eager:"))
    prototype_line = next(line for line in summary if line.startswith("prototype[aot_eager]:"))
    # dim=1 reached the program: 3 outputs (dim 0 would give 2), views of one base with eager's split node.
    assert eager_line.endswith('{"SplitBackward0": 1, "MulBackward0": 1}; 3 outputs, 3 views of 1 base')
    assert prototype_line.endswith('{"SplitBackward0": 1, "CompiledFunctionBackward": 1}; 3 outputs, 3 views of 1 base')


def _unbuildable(device: str) -> None:
    raise RuntimeError("no such device here")


def test_a_case_eager_did_not_run_is_marked_and_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = Case("broken", lambda x: x.unbind(0), lambda: [T((2, 2))])
    monkeypatch.setattr(Case, "program", lambda self, device: _unbuildable(device))
    monkeypatch.setattr(parity, "by_name", lambda name: broken)
    results = parity.run_parity([broken], [eager(), stock("aot_eager"), prototype("aot_eager")], jobs=1)
    assert results.runs == {}
    assert "no such device here" in results.eager_not_run["broken"]
    assert all(s.total == 0 and s.matched == 0 for s in report.summarize(results))
    text = report.text_table(results)
    assert "INCOMPLETE: eager did not run on 1 of 1 cases" in text
    assert "broken  eager did not run" in text
    assert "**INCOMPLETE: eager did not run on 1 of 1 cases" in report.markdown(results)


def test_a_late_failure_keeps_the_sections_already_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(parity, "run_parity_section", lambda args, out: "## Parity with eager\n\nmeasured")

    def crash(args: argparse.Namespace, out: Path) -> str:
        raise RuntimeError("benchmark crashed")

    monkeypatch.setattr(benchmarks, "run_perf_section", crash)
    parser = argparse.ArgumentParser()
    from predispatch_views.compare.main import add_compare_arguments

    add_compare_arguments(parser)
    args = parser.parse_args(["--inner", "aot_eager", "--out", str(tmp_path)])
    assert run_compare(args) == 1
    written = (tmp_path / "compare.md").read_text()
    assert written.startswith("## Parity with eager\n\nmeasured\n\n**Incomplete: the performance section failed")
    assert "RuntimeError: benchmark crashed" in written
    assert "INCOMPLETE" in capsys.readouterr().out


def _inference_region(x: torch.Tensor) -> tuple[object, ...]:
    y = x.mul(2)
    with torch.inference_mode():
        z = x.sin()
    return y.unbind(0), z


def test_fallback_entries_name_the_function_and_its_file_line() -> None:
    pv.FALLBACKS.clear()
    torch.compile(_inference_region, backend=pv.backend("aot_eager"))(torch.randn(3, 4))
    (label, reason), = pv.FALLBACKS
    assert "inference_mode" in reason
    code = _inference_region.__code__
    last_line = code.co_firstlineno + 4  # Dynamo names the line where the graph ends (the return)
    assert label == f"_inference_region ({code.co_filename}:{last_line}, graph 0/0)"

    def resize_then_split(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x.mul(2)
        row = y[0]  # a view kept across the storage change: the program falls back (Note [set_ between segments])
        y.resize_(12)
        return row, *y.split(4)

    pv.FALLBACKS.clear()
    pv.compile_function(resize_then_split)(torch.arange(12.0).reshape(3, 4))
    (label, reason), = pv.FALLBACKS
    assert "resize_" in reason
    assert label == function_label(resize_then_split)
    code = resize_then_split.__code__
    name = "test_fallback_entries_name_the_function_and_its_file_line.<locals>.resize_then_split"
    assert label == f"{name} ({code.co_filename}:{code.co_firstlineno})"


def test_run_launches_a_script_with_the_flag_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "train.py"
    report_file = tmp_path / "seen.json"
    script.write_text(
        "import json, os, sys\nimport predispatch_views\n"
        f"json.dump([predispatch_views.is_enabled(), os.environ['PREDISPATCH_VIEWS'], sys.argv[1:], __name__], "
        f"open({str(report_file)!r}, 'w'))\n"
    )
    monkeypatch.setenv("PREDISPATCH_VIEWS", "0")  # recorded, so the launcher's export is undone afterwards
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    from predispatch_views.__main__ import main

    assert not pv.is_enabled()
    assert main(["run", str(script), "--epochs", "2"]) == 0
    assert json.loads(report_file.read_text()) == [True, "1", ["--epochs", "2"], "__main__"]
    assert not pv.is_enabled()  # switched off again when the script returns
    assert main(["run", str(tmp_path / "missing.py")]) == 2
