"""The pytest plugin the PyTorch-test runner (``pytorch_tests.py``) loads with ``-p`` into every pytest process
(from this folder, put on PYTHONPATH: see __init__.py).

It is driven by environment variables the runner sets, and does six things:

- writes one JSON line per event to ``$PREDISPATCH_VIEWS_PT_LOG``: the collected test ids (collection runs), a
  ``start`` line before each test and an ``end`` line with its outcome after it, each flushed at once, so that
  when the process dies the runner knows which test was running;
- runs only the test ids listed in ``$PREDISPATCH_VIEWS_PT_IDS`` (one a line), so a shard can be restarted after
  the test that crashed it;
- arms ``faulthandler.dump_traceback_later(..., exit=True)`` around each test, so a hanging test ends its process
  (the runner then records it as crashed, with a timeout message);
- for the ``prototype`` strategy in the ``dynamo-wrapped`` mode, patches ``TestCase.compile_fn``
  (torch/testing/_internal/common_utils.py), which ``PYTORCH_TEST_WITH_AOT_EAGER=1`` uses to compile each test body
  with ``"aot_eager_decomp_partition"``, so that a backend given by name is wrapped as
  ``predispatch_views.backend(name)``: the same inner backend as stock;
- for the ``prototype`` strategy in the ``swapped`` mode, routes the test file's own compile entry points through
  the prototype (predispatch_views_pt_swap.py) and logs per test how often the prototype compiled or ran
  (``reached``);
- collects garbage after each test, under every strategy. Torch 2.13's compiled autograd enters a compile
  context when a capture begins (``AutogradCompilerInstance.begin_capture``) and leaves it only when the capture
  ends: a capture that raises (``torch.compile does not currently support higher order gradients``) leaves it
  set, and the context manager's cleanup, run whenever the garbage collector reaches it, resets Dynamo's context
  to what it was then, possibly inside a later test's compile: ``AssertionError: compile_context is not set``,
  order-dependent (test_autograd.py's ``test_pyscalar_conversions_cpu`` after ``test_inplace_on_view_gradcheck_cpu``
  in one shard). Collected between tests, the reset happens where no compile runs.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import sys
import time
from typing import Any

import pytest

STRATEGY_ENV = "PREDISPATCH_VIEWS_PT_STRATEGY"
LOG_ENV = "PREDISPATCH_VIEWS_PT_LOG"
IDS_ENV = "PREDISPATCH_VIEWS_PT_IDS"
TEST_TIMEOUT_ENV = "PREDISPATCH_VIEWS_PT_TEST_TIMEOUT"
MODE_ENV = "PREDISPATCH_VIEWS_PT_MODE"
MODES = ("dynamo-wrapped", "swapped")
# Set on TestCase.compile_fn by the patch: lets a test (and the runner's own test) see that the patch is in.
PATCH_MARK = "__predispatch_views_patched__"

_log_file: Any = None
_outcomes: dict[str, dict[str, Any]] = {}
_patched = False


def _write(record: dict[str, Any]) -> None:
    if _log_file is None:
        return
    _log_file.write(json.dumps(record) + "\n")
    _log_file.flush()  # in the kernel's hands now: survives the process dying on the next line


def _patch_compile_fn() -> bool:
    """Wrap TestCase.compile_fn so a backend named by a string goes through the prototype. Idempotent."""
    common_utils = sys.modules.get("torch.testing._internal.common_utils")
    if common_utils is None:
        return False
    test_case = common_utils.TestCase
    if getattr(test_case.compile_fn, PATCH_MARK, False):
        return True
    original = test_case.compile_fn

    def compile_fn(self: Any, fn: Any, backend: Any, nopython: bool) -> Any:
        if isinstance(backend, str):
            import predispatch_views

            backend = predispatch_views.backend(backend)
        return original(self, fn, backend, nopython)

    setattr(compile_fn, PATCH_MARK, True)
    test_case.compile_fn = compile_fn
    return True


def _swapping() -> bool:
    return os.environ.get(STRATEGY_ENV) == "prototype" and os.environ.get(MODE_ENV) == "swapped"


def _swap_calls() -> int:
    swap = sys.modules.get("predispatch_views_pt_swap")
    return swap.calls() if swap is not None else 0


def pytest_configure(config: pytest.Config) -> None:
    global _log_file
    path = os.environ.get(LOG_ENV)
    if path:
        _log_file = open(path, "a", buffering=1)  # noqa: SIM115 (open for the whole session)
    _write({"event": "session", "strategy": os.environ.get(STRATEGY_ENV, ""), "pid": os.getpid()})
    if _swapping():
        # Before the test modules are imported: a module-level torch.compile call is swapped too.
        import predispatch_views_pt_swap

        predispatch_views_pt_swap.install_global()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    global _patched
    if _swapping():
        import predispatch_views_pt_swap

        # The test modules are imported by now: swap the entry points they bound by name.
        modules = {item.module for item in items if getattr(item, "module", None) is not None}
        names = sorted({n for m in modules for n in predispatch_views_pt_swap.install_in_module(m)})
        _patched = True
        _write({"event": "patched", "patched": True, "swapped": ["torch.compile", "torch._dynamo.optimize", *names]})
    elif os.environ.get(STRATEGY_ENV) == "prototype":
        # The test modules are imported by now: TestCase is there if any test uses it.
        _patched = _patch_compile_fn()
        _write({"event": "patched", "patched": _patched})
    ids_path = os.environ.get(IDS_ENV)
    if not ids_path:
        return
    with open(ids_path) as f:
        wanted = {line.rstrip("\n") for line in f if line.strip()}
    keep = [item for item in items if item.nodeid in wanted]
    dropped = [item for item in items if item.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    _write({"event": "collected", "ids": [item.nodeid for item in session.items]})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _write({"event": "collect_error", "where": report.nodeid, "error": _error_text(report)})


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _outcomes[nodeid] = {"outcome": "passed", "error": "", "start": time.time(), "calls": _swap_calls()}
    _write({"event": "start", "id": nodeid, "time": time.time()})
    timeout = float(os.environ.get(TEST_TIMEOUT_ENV, "0") or 0)
    if timeout > 0:
        faulthandler.dump_traceback_later(timeout, exit=True)


def _error_text(report: Any) -> str:
    """The exception line of a failure: 'Type: message' (reprcrash), else the last line of the report."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (file, line, reason)
        return str(longrepr[2])
    text = str(longrepr or "").strip()
    return text.splitlines()[-1] if text else ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    state = _outcomes.setdefault(report.nodeid, {"outcome": "passed", "error": "", "start": time.time()})
    if state["outcome"] != "passed":
        return  # the first phase that did not pass decides (a teardown error after a failure stays a failure)
    if hasattr(report, "wasxfail"):
        # unittest.expectedFailure: an expected failure counts as skipped, an unexpected success as a failure.
        if report.skipped:
            state.update(outcome="skipped", error=f"xfail: {report.wasxfail}")
        elif report.passed and report.when == "call":
            state.update(outcome="failed", error="unexpected success (the test is marked expectedFailure)")
        return
    if report.skipped:
        state.update(outcome="skipped", error=_error_text(report))
    elif report.failed:
        where = "" if report.when == "call" else f"[{report.when}] "
        # assertExpectedInline's mismatch (expecttest): the test compares graph text, not behaviour.
        graph_text = "EXPECTTEST_ACCEPT" in str(report.longrepr)
        state.update(outcome="failed", error=where + _error_text(report), graph_text=graph_text)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    gc.collect()  # see the module docstring: a compile context compiled autograd left set is reset here


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    faulthandler.cancel_dump_traceback_later()
    state = _outcomes.pop(nodeid, {"outcome": "passed", "error": "", "start": time.time()})
    _write(
        {
            "event": "end",
            "id": nodeid,
            "outcome": state["outcome"],
            "error": state["error"][:4000],
            "seconds": round(time.time() - state["start"], 3),
            "reached": _swap_calls() - state.get("calls", 0) if _swapping() else -1,
            "graph_text": state.get("graph_text", False),
        }
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    _write({"event": "finished"})
    if _log_file is not None:
        _log_file.close()
