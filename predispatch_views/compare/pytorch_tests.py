"""PyTorch's own test files as an oracle: each test run under stock and under the prototype, in one of two modes.

``python -m predispatch_views compare --pytorch-tests PATH [--pytorch-tests-filter EXPR] [--jobs N]``

PATH is a PyTorch source tree (its ``test/`` files listed in ``DEFAULT_FILES`` are run where present) or one test
file. The copies live outside this repository; nothing here depends on any one of them. Each strategy runs in its
own pytest processes. What the strategies do depends on the file's mode (``mode_for``: by file name unless
``run_pytorch_tests(mode=...)`` or ``args.pytorch_tests_mode`` names one):

``dynamo-wrapped`` (test_view_ops.py, test_autograd.py, any file that tests eager behaviour). Question: does a
program compiled by the prototype behave as eager where stock does? Every test body becomes such a program.

- ``plain``: no compile;
- ``stock``: ``PYTORCH_TEST_WITH_AOT_EAGER=1``, the way PyTorch's CI runs its suites dynamo-wrapped:
  ``TestCase._run_custom`` compiles each test body with ``compile_fn(super_run, "aot_eager_decomp_partition",
  nopython)`` and turns compiled autograd on;
- ``prototype``: the same, with ``TestCase.compile_fn`` patched (pytorch_tests_plugin/predispatch_views_pt_plugin.py)
  so that the backend is ``predispatch_views.backend("aot_eager_decomp_partition")``.

``swapped`` (test_aotdispatch.py, test_functionalization.py: files that test AOTAutograd or functionalization
themselves; PyTorch's CI leaves them out of its dynamo-wrapped runs, and wrapping them compiles each test body a
second time around the compiler under test, which measures Dynamo more than the compiler). Question: does the
prototype keep the guarantees these tests check of AOTAutograd (outputs, gradients, input mutations, views and
their errors, against eager) where AOTAutograd itself keeps them?

- ``stock``: the file run plainly: its own calls into AOTAutograd and torch.compile, as written. There is no
  separate ``plain`` run (it would be the same processes);
- ``prototype``: the same calls routed through the prototype (pytorch_tests_plugin/predispatch_views_pt_swap.py):
  ``torch.compile``/``torch._dynamo.optimize`` with an AOTAutograd-based backend get
  ``predispatch_views.backend(that backend)``, and ``aot_function``/``aot_module`` get ``compile_function`` with
  the test's own compilers, partitioner and decompositions as its inner backend. Each test logs how often the
  prototype compiled or ran (``reached``); a test that never reached it compares nothing, and the report counts
  those. A failure whose error is assertExpectedInline's (the test compares graph text, which the prototype
  changes by design: it hands the inner compiler its core graph without the trailing views) is listed apart
  from behaviour failures.

In both modes a test counts in the comparison only where the plain run (``swapped``: the stock run) passes (the
copies may be newer than the installed torch). The tests that pass under stock and fail or crash under the
prototype are prototype-only failures.

Crashes: the test ids are split into shards, each run by one pytest process with a per-test timeout; the plugin logs
a line before and after every test. When a process dies (segfault, abort, timeout), the test that was running is
recorded as crashed and the shard is restarted after it.

One engine per run: a run takes many minutes while the working tree may change underneath (the engine is edited
and committed during runs), and each pytest process imports the package when it starts. So the runner copies the
package as it is at the start (``snapshot_engine``) and puts the copy first on every process's PYTHONPATH; the
report names the commit and a hash of the copy's engine modules (``engine_fingerprint``), and says so when the
working tree's engine modules changed during the run (the results are still the copy's).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .pytorch_test_files import DEFAULT_FILES, STRATEGIES, find_test_files, mode_for
from .pytorch_tests_plugin.predispatch_views_pt_plugin import (
    IDS_ENV,
    LOG_ENV,
    MODE_ENV,
    STRATEGY_ENV,
    TEST_TIMEOUT_ENV,
)

# Loaded by module name from its own folder, put first on PYTHONPATH (see pytorch_tests_plugin/__init__.py).
PLUGIN = "predispatch_views_pt_plugin"
PLUGIN_DIR = Path(__file__).resolve().parent / "pytorch_tests_plugin"
# The folder that holds the package (a checkout's root, or site-packages), and what snapshot_engine copies from it.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
ENGINE_PACKAGES = ("predispatch_views", "predispatch_views_autoload")
# Exported to the pytest processes: the snapshot they import (a test can check it).
ENGINE_ENV = "PREDISPATCH_VIEWS_PT_ENGINE"
OUTCOMES = ("passed", "failed", "crashed", "skipped", "missing")
# Variables that would change what a strategy runs: the runner sets the ones it wants itself.
_CLEARED_ENV = (
    "PYTORCH_TEST_WITH_AOT_EAGER",
    "PYTORCH_TEST_WITH_DYNAMO",
    "PYTORCH_TEST_WITH_INDUCTOR",
    "PYTORCH_TEST_WITHOUT_COMPILED_AUTOGRAD",
    "PREDISPATCH_VIEWS",
    "PYTEST_ADDOPTS",
    MODE_ENV,
)


@dataclass
class TestResult:
    outcome: str  # one of OUTCOMES
    error: str = ""
    seconds: float = 0.0
    reached: int = -1  # swapped mode, prototype: how often the prototype compiled or ran in the test (-1: not counted)
    graph_text: bool = False  # the failure is assertExpectedInline's (graph text differs)


@dataclass
class FileRun:
    """One test file: its collected ids and, per strategy, each test's result and the processes' wall time."""

    path: Path
    mode: str = "dynamo-wrapped"
    ids: list[str] = field(default_factory=list)
    collect_error: str = ""
    results: dict[str, dict[str, TestResult]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    processes: Counter[str] = field(default_factory=Counter)
    patched: dict[str, bool] = field(default_factory=dict)

    @property
    def name(self) -> str:
        parts = self.path.parts
        return "/".join(parts[parts.index("test") :]) if "test" in parts else self.path.name


def working_dir(test_file: Path) -> Path:
    """The ``test`` folder that holds the file (PyTorch runs its tests from there), else the file's own folder."""
    for parent in test_file.parents:
        if parent.name == "test":
            return parent
    return test_file.parent


def strategy_env(strategy: str, engine_dir: Path | None = None, mode: str = "dynamo-wrapped") -> dict[str, str]:
    """The environment of a strategy's pytest processes; ``engine_dir`` (a snapshot_engine copy) goes first on
    PYTHONPATH, before the installed package, so that every process of a run imports the same engine."""
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED_ENV}
    env[STRATEGY_ENV] = strategy
    env[MODE_ENV] = mode
    if strategy in ("stock", "prototype") and mode == "dynamo-wrapped":
        env["PYTORCH_TEST_WITH_AOT_EAGER"] = "1"
    env.setdefault("PYTHONFAULTHANDLER", "1")
    paths = [str(PLUGIN_DIR)]
    if engine_dir is not None:
        paths.append(str(engine_dir))
        env[ENGINE_ENV] = str(engine_dir)
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
    return env


def snapshot_engine(dest: Path, root: Path = PACKAGE_ROOT) -> Path:
    """Copy the packages of ENGINE_PACKAGES found under ``root`` into ``dest`` (created) and return ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ENGINE_PACKAGES:
        if (root / name).is_dir():
            shutil.copytree(root / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def engine_fingerprint(root: Path = PACKAGE_ROOT) -> str:
    """A short sha256 of the engine modules (the package's top-level .py files, names and contents) under ``root``."""
    digest = hashlib.sha256()
    for path in sorted((root / "predispatch_views").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


# ---------------------------------------------------------------------------------------------------------------
# One pytest process
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class ProcessRun:
    returncode: int
    events: list[dict[str, Any]]
    stderr_tail: str
    seconds: float
    timed_out: bool


def _pytest_command(test_file: Path, extra: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        str(test_file),
        "-p",
        PLUGIN,
        "-p",
        "no:cacheprovider",
        "-q",
        "--no-header",
        "-o",
        "addopts=",
        "-W",
        "ignore::DeprecationWarning",
        *extra,
    ]


def run_pytest(
    test_file: Path,
    strategy: str,
    *,
    ids: Sequence[str] | None,
    extra: Sequence[str] = (),
    test_timeout: float,
    idle_timeout: float,
    scratch: Path,
    engine_dir: Path | None = None,
    mode: str = "dynamo-wrapped",
) -> ProcessRun:
    """Run pytest on ``test_file`` (only ``ids`` if given) and return the plugin's events.

    ``idle_timeout``: the process is killed when the plugin logs nothing for that long (a hang the per-test
    faulthandler timeout did not end).
    """
    fd, log_path = tempfile.mkstemp(prefix=f"{strategy}-", suffix=".jsonl", dir=scratch)
    os.close(fd)
    env = strategy_env(strategy, engine_dir, mode)
    env[LOG_ENV] = log_path
    env[TEST_TIMEOUT_ENV] = str(test_timeout)
    if ids is not None:
        ids_fd, ids_path = tempfile.mkstemp(prefix="ids-", suffix=".txt", dir=scratch)
        with os.fdopen(ids_fd, "w") as f:
            f.write("\n".join(ids) + "\n")
        env[IDS_ENV] = ids_path
    err_fd, err_path = tempfile.mkstemp(prefix="stderr-", suffix=".txt", dir=scratch)
    start = time.monotonic()
    with os.fdopen(err_fd, "w") as err:
        proc = subprocess.Popen(
            _pytest_command(test_file, extra),
            cwd=working_dir(test_file),
            env=env,
            stdout=err,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: a kill reaches the workers it starts too
        )
        timed_out = False
        last_size, last_change = -1, time.monotonic()
        while proc.poll() is None:
            time.sleep(0.2)
            size = os.path.getsize(log_path)
            if size != last_size:
                last_size, last_change = size, time.monotonic()
            elif time.monotonic() - last_change > idle_timeout:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    seconds = time.monotonic() - start
    events = []
    with open(log_path) as f:
        for line in f:
            with contextlib.suppress(json.JSONDecodeError):  # a line cut by the process dying mid-write
                events.append(json.loads(line))
    with open(err_path, errors="replace") as f:
        stderr_tail = f.read()[-6000:]
    return ProcessRun(proc.returncode, events, stderr_tail, seconds, timed_out)


def _death_message(run: ProcessRun, test_timeout: float, running_since: float | None) -> str:
    if run.timed_out:
        return "timeout: no progress, the runner killed the process"
    if running_since is not None and time.time() - running_since >= test_timeout - 1:
        return f"timeout: the test ran over {test_timeout:.0f} s (faulthandler ended the process)"
    rc = run.returncode
    how = f"signal {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.Signals._value2member_map_ else f"exit {rc}"
    fatal = next((ln.strip() for ln in run.stderr_tail.splitlines() if ln.startswith("Fatal Python error")), "")
    return f"the process died ({how})" + (f": {fatal}" if fatal else "")


# ---------------------------------------------------------------------------------------------------------------
# Collection and shards
# ---------------------------------------------------------------------------------------------------------------


def collect(
    test_file: Path, filter_expr: str | None, scratch: Path, timeout: float, engine_dir: Path | None = None
) -> tuple[list[str], str]:
    """The test ids of a file under the plain strategy (``-k filter_expr`` applied), and a collection error if any."""
    extra = ["--collect-only"] + (["-k", filter_expr] if filter_expr else [])
    run = run_pytest(
        test_file,
        "plain",
        ids=None,
        extra=extra,
        test_timeout=0,
        idle_timeout=timeout,
        scratch=scratch,
        engine_dir=engine_dir,
    )
    ids: list[str] = []
    errors = []
    for event in run.events:
        if event["event"] == "collected":
            ids = event["ids"]
        elif event["event"] == "collect_error":
            errors.append(event["error"])
    if not ids and not errors and run.returncode not in (0, 5):
        tail = run.stderr_tail.strip().splitlines()
        errors.append(_death_message(run, 0, None) + (f": {tail[-1]}" if tail else ""))
    return ids, "; ".join(e.splitlines()[0] if e else "" for e in errors)


def run_shard(
    test_file: Path,
    strategy: str,
    ids: Sequence[str],
    *,
    test_timeout: float,
    scratch: Path,
    on_process: Callable[[ProcessRun], None],
    engine_dir: Path | None = None,
    mode: str = "dynamo-wrapped",
) -> dict[str, TestResult]:
    """Run ``ids``, restarting after each crash, until every id has a result."""
    results: dict[str, TestResult] = {}
    remaining = list(ids)
    while remaining:
        run = run_pytest(
            test_file,
            strategy,
            ids=remaining,
            test_timeout=test_timeout,
            idle_timeout=test_timeout + 120,
            scratch=scratch,
            engine_dir=engine_dir,
            mode=mode,
        )
        on_process(run)
        running: str | None = None
        running_since: float | None = None
        started_any = False
        for event in run.events:
            if event["event"] == "start":
                running, running_since, started_any = event["id"], event["time"], True
            elif event["event"] == "end":
                results[event["id"]] = TestResult(
                    event["outcome"],
                    event["error"],
                    event["seconds"],
                    event.get("reached", -1),
                    event.get("graph_text", False),
                )
                running = None
        finished = any(e["event"] == "finished" for e in run.events)
        if running is not None:  # died inside a test: that test crashed, the rest run again in a new process
            elapsed = round(time.time() - running_since, 3) if running_since else 0.0
            results[running] = TestResult("crashed", _death_message(run, test_timeout, running_since), elapsed)
        elif not started_any:
            # No test ran: a collection error (the module failed to import under this strategy) fails them all,
            # a process that died first (an import crash) crashes them all; no retry loop either way.
            collect_errors = [e["error"] for e in run.events if e["event"] == "collect_error"]
            if collect_errors:
                outcome, message = "failed", "collection error: " + collect_errors[0]
            else:
                outcome, message = "crashed", "before any test ran: " + _death_message(run, test_timeout, None)
            if finished and not collect_errors:
                outcome, message = "missing", "not collected under this strategy"
            for test_id in remaining:
                results[test_id] = TestResult(outcome, message)
        remaining = [i for i in remaining if i not in results]
        if finished or (running is None and started_any):
            # The session ended (or died between tests): whatever it did not report was not collected here.
            for test_id in remaining:
                results[test_id] = TestResult("missing", "not collected under this strategy")
            remaining = []
    return results


# ---------------------------------------------------------------------------------------------------------------
# The whole run
# ---------------------------------------------------------------------------------------------------------------


def run_pytorch_tests(
    path: Path,
    *,
    filter_expr: str | None = None,
    jobs: int = 1,
    shard_size: int = 50,
    test_timeout: float = 600.0,
    strategies: Sequence[str] = STRATEGIES,
    scratch: Path | None = None,
    progress: Callable[[str], None] = print,
    engine_dir: Path | None = None,
    mode: str = "auto",
) -> list[FileRun]:
    """Run the files under ``path``; every pytest process imports the engine from ``engine_dir`` (a snapshot_engine
    copy), or from a copy taken here when it is None. ``mode``: "auto" (by file name), "dynamo-wrapped" or
    "swapped" (the module docstring); a swapped file skips ``plain`` (its stock run is the plain run)."""
    files = find_test_files(path)
    if not files:
        raise FileNotFoundError(
            f"{path}: no test file (expected a test file or a tree with {', '.join(DEFAULT_FILES)})"
        )
    scratch_dir = Path(tempfile.mkdtemp(prefix="pytorch-tests-", dir=scratch))
    if engine_dir is None:
        engine_dir = snapshot_engine(scratch_dir / "engine")
    runs = [FileRun(f, mode=mode_for(f, mode)) for f in files]
    lock = threading.Lock()
    tasks: list[tuple[FileRun, str, list[str]]] = []
    for run in runs:
        start = time.monotonic()
        run.ids, run.collect_error = collect(run.path, filter_expr, scratch_dir, timeout=900, engine_dir=engine_dir)
        progress(
            f"{run.name} ({run.mode}): {len(run.ids)} tests collected in {time.monotonic() - start:.0f} s"
            + (f" (collection error: {run.collect_error})" if run.collect_error else "")
        )
        file_strategies = [s for s in strategies if not (run.mode == "swapped" and s == "plain")]
        for strategy in file_strategies:
            run.results[strategy] = {}
            run.seconds[strategy] = 0.0
        shards = [run.ids[i : i + shard_size] for i in range(0, len(run.ids), shard_size)]
        # Interleaved, so that the strategies of a shard finish close together.
        tasks += [(run, strategy, shard) for shard in shards for strategy in file_strategies]

    def work(task: tuple[FileRun, str, list[str]]) -> None:
        run, strategy, shard = task

        def on_process(p: ProcessRun) -> None:
            with lock:
                run.seconds[strategy] += p.seconds
                run.processes[strategy] += 1
                for event in p.events:
                    if event["event"] == "patched":
                        run.patched[strategy] = run.patched.get(strategy, False) or event["patched"]

        results = run_shard(
            run.path,
            strategy,
            shard,
            test_timeout=test_timeout,
            scratch=scratch_dir,
            on_process=on_process,
            engine_dir=engine_dir,
            mode=run.mode,
        )
        with lock:
            run.results[strategy].update(results)
            counts = Counter(r.outcome for r in results.values())
            progress(
                f"{run.name} [{strategy}] {len(results)} tests: " + ", ".join(f"{n} {k}" for k, n in counts.items())
            )

    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        list(pool.map(work, tasks))
    return runs


# ---------------------------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Regression:
    file: str
    test: str
    outcome: str
    error: str
    reached: int = -1  # swapped mode: how often the prototype compiled or ran in the test
    graph_text: bool = False  # assertExpectedInline's failure: graph text, not behaviour

    @property
    def kind(self) -> str:
        if self.graph_text:
            return "graph text"
        return "not reached" if self.reached == 0 else "behaviour"


def _passed_where_required(run: FileRun, test_id: str, strategy: str) -> bool:
    """``test_id`` passed under ``strategy``, or ``strategy`` was not run for the file (a swapped file has no plain)."""
    results = run.results.get(strategy)
    return results is None or results.get(test_id, TestResult("missing")).outcome == "passed"


def prototype_only_failures(run: FileRun) -> list[Regression]:
    """Tests that pass plainly (where run) and under stock, and fail or crash under the prototype."""
    found = []
    proto = run.results.get("prototype", {})
    for test_id in run.ids:
        if test_id not in proto or proto[test_id].outcome not in ("failed", "crashed"):
            continue
        if "stock" not in run.results or not _passed_where_required(run, test_id, "stock"):
            continue
        if _passed_where_required(run, test_id, "plain"):
            r = proto[test_id]
            found.append(Regression(run.name, test_id, r.outcome, r.error, r.reached, r.graph_text))
    return found


def stock_only_failures(run: FileRun) -> list[Regression]:
    """The other direction, for information: plain (where run) and the prototype pass, stock fails or crashes."""
    stock, proto = run.results.get("stock", {}), run.results.get("prototype", {})
    return [
        Regression(run.name, t, stock[t].outcome, stock[t].error)
        for t in run.ids
        if t in stock
        and _passed_where_required(run, t, "plain")
        and proto.get(t, TestResult("missing")).outcome == "passed"
        and stock[t].outcome in ("failed", "crashed")
    ]


def engine_revision() -> str:
    """The prototype's git commit, marked when the engine's working tree differs from it (runs take minutes while the
    engine may change underneath), or "unknown" outside a git checkout."""
    package = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=package, capture_output=True, text=True, check=True
        ).stdout.strip()
        engine_files = ":(glob)*.py"  # the package's top-level modules, not compare/
        status = ["git", "status", "--porcelain", "--", engine_files]
        dirty = subprocess.run(status, cwd=package, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + (" with uncommitted changes to the engine modules" if dirty else "")


def error_line(error: str) -> str:
    """The first line of an error, with the wrapped error's line where Dynamo wraps one ('... raised:')."""
    lines = [ln.strip() for ln in error.splitlines() if ln.strip()]
    if not lines:
        return ""
    if lines[0].endswith("raised:") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:300]


def summary_rows(runs: Sequence[FileRun]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        # The baseline a test must pass to count: the plain run, or in the swapped mode the stock run (plainly run).
        baseline = "plain" if "plain" in run.results else "stock"
        plain_passed = {t for t, r in run.results.get(baseline, {}).items() if r.outcome == "passed"}
        for strategy in run.results:
            results = run.results[strategy]
            counts = Counter(r.outcome for r in results.values())
            reached = [r.reached for r in results.values() if r.reached >= 0]
            rows.append(
                {
                    "file": run.name,
                    "mode": run.mode,
                    "strategy": strategy,
                    "tests": len(results),
                    **{k: counts.get(k, 0) for k in OUTCOMES},
                    "passed_of_plain_passed": sum(1 for t in plain_passed if results[t].outcome == "passed"),
                    "plain_passed": len(plain_passed),
                    "reached_prototype": sum(1 for n in reached if n > 0) if reached else "",
                    "seconds": round(run.seconds.get(strategy, 0.0)),
                    "processes": run.processes.get(strategy, 0),
                    "compile_fn_patched": "" if strategy != "prototype" else str(run.patched.get(strategy, False)),
                }
            )
    return rows


def write_reports(
    runs: Sequence[FileRun],
    out_dir: Path,
    *,
    command: str,
    filter_expr: str | None,
    elapsed: float,
    engine: str = "unknown",
    torch_version: str = "unknown",
) -> str:
    """pytorch_tests.md, pytorch_tests_summary.csv, pytorch_tests_prototype_only.csv, pytorch_tests_results.csv."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = summary_rows(runs)
    regressions = [r for run in runs for r in prototype_only_failures(run)]
    stock_only = [r for run in runs for r in stock_only_failures(run)]

    with open(out_dir / "pytorch_tests_summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["file"])
        writer.writeheader()
        writer.writerows(rows)
    with open(out_dir / "pytorch_tests_prototype_only.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["file", "test", "prototype_outcome", "kind", "reached", "error_first_line", "error"])
        for r in regressions:
            writer.writerow([r.file, r.test, r.outcome, r.kind, r.reached, error_line(r.error), r.error])
    with open(out_dir / "pytorch_tests_results.csv", "w", newline="") as f:
        writer = csv.writer(f)
        strategies = [s for s in STRATEGIES if any(s in run.results for run in runs)]
        columns = [f"{s}_{c}" for s in strategies for c in ("outcome", "seconds", "error")]
        writer.writerow(["file", "mode", "test", *columns, "prototype_reached"])
        for run in runs:
            for test_id in run.ids:
                cells: list[Any] = [run.name, run.mode, test_id]
                for s in strategies:
                    r = run.results.get(s, {}).get(test_id, TestResult("missing"))
                    cells += [r.outcome, r.seconds, error_line(r.error)]
                writer.writerow([*cells, run.results.get("prototype", {}).get(test_id, TestResult("missing")).reached])

    modes = {run.mode for run in runs}
    lines = ["# PyTorch's test files: stock and the prototype", ""]
    if "dynamo-wrapped" in modes:
        lines.append(
            "Mode `dynamo-wrapped`: `plain`: no compile. `stock`: `PYTORCH_TEST_WITH_AOT_EAGER=1` (each test body "
            'under `torch.compile(backend="aot_eager_decomp_partition")`, compiled autograd on). `prototype`: the same '
            'with `TestCase.compile_fn` patched to `predispatch_views.backend("aot_eager_decomp_partition")`. A test '
            "counts in the comparison only where the plain run passes."
        )
    if "swapped" in modes:
        lines += [
            "",
            "Mode `swapped` (files that test AOTAutograd or functionalization themselves): `stock`: the file run "
            "plainly, its own AOTAutograd and torch.compile calls as written (no separate plain run). `prototype`: "
            "those calls routed through the prototype (`torch.compile`/`torch._dynamo.optimize` with an "
            "AOTAutograd-based backend: `predispatch_views.backend(that backend)`; `aot_function`/`aot_module`: "
            "`compile_function` with the test's compilers as its inner backend). `reached`: tests in which the "
            "prototype compiled or ran; the others ran as under stock and compare nothing. A test counts only where "
            "the stock run passes. Kind `graph text`: assertExpectedInline failed (the prototype hands the inner "
            "compiler its core graph without the trailing views, so graph text differs by design).",
        ]
    lines += [
        "",
        "`crashed`: the process died in the test (signal, abort) or the test timed out; `missing`: not collected "
        "under that strategy.",
    ]
    lines += ["", f"Command: `{command}`" + (f" (filter `-k {filter_expr}`)" if filter_expr else "")]
    lines += ["", f"Engine: {engine}; torch {torch_version}.", ""]
    for run in runs:
        if run.collect_error:
            lines.append(f"- {run.name}: collection error: {_md_cell(run.collect_error)}")
    header = (
        "| file | mode | strategy | tests | passed | failed | crashed | skipped | missing | passed of baseline-passed "
        "| reached | s |"
    )
    lines += ["", header, "|" + "---|" * 12]
    for row in rows:
        lines.append(
            f"| {row['file']} | {row['mode']} | {row['strategy']} | {row['tests']} | {row['passed']} | "
            f"{row['failed']} | {row['crashed']} | {row['skipped']} | {row['missing']} | "
            f"{row['passed_of_plain_passed']}/{row['plain_passed']} | {row['reached_prototype']} | {row['seconds']} |"
        )
    lines += ["", "Baseline: `plain` (dynamo-wrapped) or `stock` (swapped). `reached`: swapped mode only."]
    unpatched = [
        run.name
        for run in runs
        if run.mode == "dynamo-wrapped" and "prototype" in run.results and not run.patched.get("prototype")
    ]
    if unpatched:
        lines += ["", f"`TestCase.compile_fn` was not patched (no torch TestCase imported) in: {', '.join(unpatched)}."]
    kinds = Counter(r.kind for r in regressions)
    lines += ["", f"## Pass under plain and stock, fail or crash under the prototype: {len(regressions)}", ""]
    if regressions:
        lines += ["By kind: " + ", ".join(f"{kinds[k]} {k}" for k in ("behaviour", "graph text", "not reached")), ""]
        lines += ["| file | test | prototype | kind | first error line |", "|---|---|---|---|---|"]
        lines += [
            f"| {r.file} | `{r.test.split('::', 1)[-1]}` | {r.outcome} | {r.kind} | {_md_cell(error_line(r.error))} |"
            for r in regressions
        ]
    lines += ["", f"## For information: pass under plain and the prototype, fail under stock: {len(stock_only)}", ""]
    if stock_only:
        lines += ["| file | test | stock | first error line |", "|---|---|---|---|"]
        lines += [
            f"| {r.file} | `{r.test.split('::', 1)[-1]}` | {r.outcome} | {_md_cell(error_line(r.error))} |"
            for r in stock_only
        ]
    lines += ["", f"_Generated by `python -m predispatch_views compare --pytorch-tests` in {elapsed:.0f} s._", ""]
    text = "\n".join(lines)
    (out_dir / "pytorch_tests.md").write_text(text)
    return text


def run_pytorch_tests_section(args: Any, out_dir: Path) -> int:
    """The ``compare --pytorch-tests`` entry: run, write the reports, print the summary. Exit status 0."""
    import torch

    start = time.monotonic()
    engine_dir = snapshot_engine(Path(tempfile.mkdtemp(prefix="pytorch-tests-engine-")))
    fingerprint = engine_fingerprint(engine_dir)
    engine = f"{engine_revision()} at the start, engine modules sha256 {fingerprint} (every process ran a copy of them)"
    strategies = tuple(s.strip() for s in args.pytorch_tests_strategies.split(",") if s.strip())
    try:
        runs = run_pytorch_tests(
            Path(args.pytorch_tests),
            filter_expr=args.pytorch_tests_filter,
            jobs=max(args.jobs, 1),
            shard_size=args.pytorch_tests_shard,
            test_timeout=args.pytorch_tests_timeout,
            strategies=strategies,
            engine_dir=engine_dir,
            mode=getattr(args, "pytorch_tests_mode", None) or "auto",
        )
    finally:
        shutil.rmtree(engine_dir, ignore_errors=True)
    if engine_fingerprint() != fingerprint:
        engine += "; the working tree's engine modules changed during the run"
    command = " ".join(["python -m predispatch_views", *sys.argv[1:]]) if sys.argv else "compare --pytorch-tests"
    text = write_reports(
        runs,
        out_dir,
        command=command,
        filter_expr=args.pytorch_tests_filter,
        elapsed=time.monotonic() - start,
        engine=engine,
        torch_version=torch.__version__,
    )
    print(text)
    print(f"wrote {out_dir / 'pytorch_tests.md'} and the CSV files beside it")
    return 0
