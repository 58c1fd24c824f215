"""The PyTorch-test runner (compare/pytorch_tests.py) on a synthetic test file: each outcome classified right.

No PyTorch test file is needed: the file is written here. Its tests pass, fail, segfault, abort, skip, and one
fails only under the prototype strategy by design (it reads the strategy the runner exports to its processes),
which the runner must list as a prototype-only failure. The file imports no torch, so each pytest process starts
in about a second.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from predispatch_views.compare.pytorch_test_files import mode_for
from predispatch_views.compare.pytorch_tests import (
    FileRun,
    engine_fingerprint,
    find_test_files,
    prototype_only_failures,
    run_pytorch_tests,
    snapshot_engine,
    strategy_env,
    working_dir,
    write_reports,
)
from predispatch_views.compare.pytorch_tests import TestResult as Result

SYNTHETIC = """
import ctypes
import os

import pytest


def test_passes():
    assert 1 + 1 == 2


def test_fails():
    assert 1 + 1 == 3, "one plus one"


def test_segfaults():
    ctypes.string_at(0)


def test_runs_after_the_crash():
    pass


def test_aborts():
    os.abort()


def test_fails_under_prototype_by_design():
    assert os.environ["PREDISPATCH_VIEWS_PT_STRATEGY"] != "prototype", "the prototype strategy"


def test_skipped():
    pytest.skip("not here")


@pytest.mark.xfail(reason="expected")
def test_expected_failure():
    assert False
"""

EXPECTED = {
    "test_passes": ("passed", "passed", "passed"),
    "test_fails": ("failed", "failed", "failed"),
    "test_segfaults": ("crashed", "crashed", "crashed"),
    "test_runs_after_the_crash": ("passed", "passed", "passed"),
    "test_aborts": ("crashed", "crashed", "crashed"),
    "test_fails_under_prototype_by_design": ("passed", "passed", "failed"),
    "test_skipped": ("skipped", "skipped", "skipped"),
    "test_expected_failure": ("skipped", "skipped", "skipped"),
}


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, Path]:
    root = tmp_path_factory.mktemp("tree")
    test_dir = root / "test"
    test_dir.mkdir()
    (test_dir / "test_synthetic.py").write_text(SYNTHETIC)
    # Shards of 3: the crashes land in different shards and each restarts its own after the crashing test.
    runs = run_pytorch_tests(
        test_dir / "test_synthetic.py", jobs=2, shard_size=3, test_timeout=120, progress=lambda _: None
    )
    out = tmp_path_factory.mktemp("out")
    write_reports(runs, out, command="test", filter_expr=None, elapsed=0.0)
    return runs, out


def test_each_outcome_classified(synthetic_run: tuple[list, Path]) -> None:
    runs, _ = synthetic_run
    (run,) = runs
    assert sorted(i.split("::")[-1] for i in run.ids) == sorted(EXPECTED)
    for test_id in run.ids:
        name = test_id.split("::")[-1]
        got = tuple(run.results[s][test_id].outcome for s in ("plain", "stock", "prototype"))
        assert got == EXPECTED[name], name
    plain = run.results["plain"]
    by_name = {i.split("::")[-1]: r for i, r in plain.items()}
    assert "SIGSEGV" in by_name["test_segfaults"].error
    assert "SIGABRT" in by_name["test_aborts"].error
    assert by_name["test_fails"].error.startswith("AssertionError: one plus one")


def test_prototype_only_failure_listed(synthetic_run: tuple[list, Path]) -> None:
    runs, out = synthetic_run
    (regression,) = prototype_only_failures(runs[0])
    assert regression.test.endswith("test_fails_under_prototype_by_design")
    assert regression.outcome == "failed"
    assert "the prototype strategy" in regression.error
    with open(out / "pytorch_tests_prototype_only.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["test"].split("::")[-1] for r in rows] == ["test_fails_under_prototype_by_design"]
    assert rows[0]["error_first_line"].startswith("AssertionError: the prototype strategy")
    with open(out / "pytorch_tests_summary.csv") as f:
        summary = {r["strategy"]: r for r in csv.DictReader(f)}
    assert (summary["plain"]["passed"], summary["plain"]["failed"], summary["plain"]["crashed"]) == ("3", "1", "2")
    assert (summary["prototype"]["passed"], summary["prototype"]["failed"]) == ("2", "2")
    assert "Pass under plain and stock, fail or crash under the prototype: 1" in (out / "pytorch_tests.md").read_text()


def test_file_discovery(tmp_path: Path) -> None:
    (tmp_path / "test" / "functorch").mkdir(parents=True)
    for rel in ("test/test_view_ops.py", "test/functorch/test_aotdispatch.py"):
        (tmp_path / rel).write_text("")
    found = find_test_files(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "test/test_view_ops.py",
        "test/functorch/test_aotdispatch.py",
    ]
    assert find_test_files(tmp_path / "test") == found
    assert working_dir(found[1]) == tmp_path / "test"


SNAPSHOT_SYNTHETIC = """
import importlib.util
import os


def test_imports_the_snapshot():
    origin = importlib.util.find_spec("predispatch_views").origin
    assert origin.startswith(os.environ["PREDISPATCH_VIEWS_PT_ENGINE"] + os.sep), origin
"""


def test_every_process_imports_the_engine_copy(tmp_path: Path) -> None:
    """The working tree changes while a run takes minutes: each pytest process must import the copy of the package
    taken at the start, not the tree (find_spec only: the file imports neither the package nor torch)."""
    test_dir = tmp_path / "test"
    test_dir.mkdir()
    (test_dir / "test_snapshot.py").write_text(SNAPSHOT_SYNTHETIC)
    (run,) = run_pytorch_tests(
        test_dir / "test_snapshot.py", strategies=("plain", "prototype"), progress=lambda _: None
    )
    for strategy in ("plain", "prototype"):
        (result,) = run.results[strategy].values()
        assert (result.outcome, result.error) == ("passed", ""), strategy


def test_engine_snapshot_and_fingerprint(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "predispatch_views" / "compare").mkdir(parents=True)
    (root / "predispatch_views" / "__pycache__").mkdir()
    (root / "predispatch_views_autoload").mkdir()
    (root / "predispatch_views" / "pipeline.py").write_text("X = 1\n")
    (root / "predispatch_views" / "compare" / "main.py").write_text("Y = 1\n")
    (root / "predispatch_views" / "__pycache__" / "pipeline.cpython-311.pyc").write_bytes(b"junk")
    (root / "predispatch_views_autoload" / "__init__.py").write_text("")
    copy = snapshot_engine(tmp_path / "copy", root=root)
    assert (copy / "predispatch_views_autoload" / "__init__.py").is_file()
    assert not (copy / "predispatch_views" / "__pycache__").exists()
    before = engine_fingerprint(root)
    assert engine_fingerprint(copy) == before
    (root / "predispatch_views" / "compare" / "main.py").write_text("Y = 2\n")  # not an engine module
    assert engine_fingerprint(root) == before
    (root / "predispatch_views" / "pipeline.py").write_text("X = 2\n")  # an engine edit during a run
    assert engine_fingerprint(root) != before
    assert engine_fingerprint(copy) == before
    assert (copy / "predispatch_views" / "pipeline.py").read_text() == "X = 1\n"


TORCH_SYNTHETIC = """
import torch
from torch.testing._internal.common_utils import TestCase, run_tests


class TestReachesTheBackend(TestCase):
    def test_unbind_grad_fn(self):
        # Eager's graph: one UnbindBackward0. Stock's compiled outputs are not views of one unbind call.
        x = torch.randn(3, 4, requires_grad=True)
        outs = x.mul(2).unbind(0)
        self.assertEqual(type(outs[0].grad_fn).__name__, "UnbindBackward0")

    def test_compile_fn_is_patched(self):
        self.assertTrue(getattr(type(self).compile_fn, "__predispatch_views_patched__", False))


if __name__ == "__main__":
    run_tests()
"""


@pytest.mark.slow
def test_prototype_strategy_reaches_the_backend(tmp_path: Path) -> None:
    """Real torch TestCases under PYTORCH_TEST_WITH_AOT_EAGER=1: the patch is applied under the prototype only, and
    the test body is compiled by the prototype (eager's UnbindBackward0 on a compiled unbind)."""
    test_dir = tmp_path / "test"
    test_dir.mkdir()
    (test_dir / "test_reaches.py").write_text(TORCH_SYNTHETIC)
    (run,) = run_pytorch_tests(test_dir / "test_reaches.py", jobs=2, test_timeout=300, progress=lambda _: None)
    by_name = {s: {i.split("::")[-1]: r.outcome for i, r in run.results[s].items()} for s in run.results}
    assert by_name["plain"] == {"test_unbind_grad_fn": "passed", "test_compile_fn_is_patched": "failed"}
    assert by_name["prototype"] == {"test_unbind_grad_fn": "passed", "test_compile_fn_is_patched": "passed"}
    assert by_name["stock"]["test_compile_fn_is_patched"] == "failed"
    assert run.patched.get("prototype") is True


def test_mode_by_file_name(tmp_path: Path) -> None:
    """The files that test AOTAutograd or functionalization themselves run swapped, every other dynamo-wrapped; in
    the swapped mode neither strategy wraps the test body (no PYTORCH_TEST_WITH_AOT_EAGER)."""
    assert mode_for(Path("test/functorch/test_aotdispatch.py")) == "swapped"
    assert mode_for(Path("test/test_functionalization.py")) == "swapped"
    assert mode_for(Path("test/test_view_ops.py")) == "dynamo-wrapped"
    assert mode_for(Path("test/test_view_ops.py"), "swapped") == "swapped"
    with pytest.raises(ValueError, match="unknown mode"):
        mode_for(Path("test/test_view_ops.py"), "wrapped")
    assert strategy_env("stock", mode="dynamo-wrapped")["PYTORCH_TEST_WITH_AOT_EAGER"] == "1"
    for strategy in ("stock", "prototype"):
        env = strategy_env(strategy, mode="swapped")
        assert "PYTORCH_TEST_WITH_AOT_EAGER" not in env
        assert env["PREDISPATCH_VIEWS_PT_MODE"] == "swapped"


def test_swapped_comparison_without_plain() -> None:
    """A swapped file has no plain run: stock is its baseline. Each failure gets its kind."""
    run = FileRun(Path("test/test_aotdispatch.py"), mode="swapped", ids=["a", "b", "c", "d"])
    run.results["stock"] = {i: Result("passed") for i in ("a", "b", "c")} | {"d": Result("failed")}
    run.results["prototype"] = {
        "a": Result("failed", "AssertionError: x", reached=2),
        "b": Result("failed", "AssertionError: 'def forward' != ...", reached=1, graph_text=True),
        "c": Result("passed", reached=0),
        "d": Result("failed", reached=1),
    }
    assert [(r.test, r.kind) for r in prototype_only_failures(run)] == [("a", "behaviour"), ("b", "graph text")]


SWAPPED_SYNTHETIC = """
import os

import torch
from functorch.compile import aot_function, nop
from torch.testing._internal.common_utils import TestCase, run_tests

PROTOTYPE = os.environ["PREDISPATCH_VIEWS_PT_STRATEGY"] == "prototype"


def f(x):
    return x.mul(2).unbind(0)


class TestSwap(TestCase):
    def test_aot_function_outputs(self):
        # Eager's graph: one UnbindBackward0; stock AOTAutograd's outputs are not views of one unbind call.
        outs = aot_function(f, nop)(torch.randn(3, 4, requires_grad=True))
        self.assertNotEqual(type(outs[0].grad_fn).__name__, "UnbindBackward0")

    def test_compile_aot_eager(self):
        outs = torch.compile(f, backend="aot_eager")(torch.randn(3, 4, requires_grad=True))
        self.assertEqual(type(outs[0].grad_fn).__name__ == "UnbindBackward0", PROTOTYPE)

    def test_graph_text(self):
        self.assertExpectedInline("prototype" if PROTOTYPE else "stock", \"\"\"stock\"\"\")


if __name__ == "__main__":
    run_tests()
"""


@pytest.mark.slow
def test_swapped_mode_reaches_the_prototype(tmp_path: Path) -> None:
    """test_aotdispatch.py runs swapped: the test's own aot_function and torch.compile(backend="aot_eager") calls go
    through the prototype (eager's UnbindBackward0 on a compiled unbind), and each test logs whether the prototype
    ran. No plain run."""
    test_dir = tmp_path / "test"
    test_dir.mkdir()
    (test_dir / "test_aotdispatch.py").write_text(SWAPPED_SYNTHETIC)
    (run,) = run_pytorch_tests(test_dir / "test_aotdispatch.py", jobs=2, test_timeout=300, progress=lambda _: None)
    assert run.mode == "swapped"
    assert sorted(run.results) == ["prototype", "stock"]
    by_name = {s: {i.split("::")[-1]: r for i, r in run.results[s].items()} for s in run.results}
    assert {n: r.outcome for n, r in by_name["stock"].items()} == dict.fromkeys(by_name["stock"], "passed")
    proto = by_name["prototype"]
    assert proto["test_aot_function_outputs"].outcome == "failed"
    assert proto["test_compile_aot_eager"].outcome == "passed"
    assert proto["test_aot_function_outputs"].reached > 0
    assert proto["test_compile_aot_eager"].reached > 0
    assert proto["test_graph_text"].reached == 0
    kinds = {r.test.split("::")[-1]: r.kind for r in prototype_only_failures(run)}
    assert kinds == {"test_aot_function_outputs": "behaviour", "test_graph_text": "graph text"}


LEAKED_CONTEXT_SYNTHETIC = """
from torch._guards import CompileContext, compile_context


def test_a_capture_leaves_its_compile_context_set():
    # What torch 2.13's compiled autograd does when a capture raises: the context is entered, never exited, and
    # its cleanup waits for the garbage collector (here held in a reference cycle).
    context = compile_context(CompileContext(None))
    context.__enter__()
    holder = [context]
    holder.append(holder)


def test_the_next_test_starts_without_it():
    assert CompileContext.try_get() is None
"""


def test_garbage_is_collected_between_tests(tmp_path: Path) -> None:
    """The plugin collects garbage after each test, so a compile context a failing compiled-autograd capture left
    set is reset between tests, not inside a later test's compile (test_autograd.py's order-dependent
    ``compile_context is not set``)."""
    test_dir = tmp_path / "test"
    test_dir.mkdir()
    (test_dir / "test_leaked_context.py").write_text(LEAKED_CONTEXT_SYNTHETIC)
    (run,) = run_pytorch_tests(test_dir / "test_leaked_context.py", strategies=("plain",), progress=lambda _: None)
    outcomes = {i.split("::")[-1]: r.outcome for i, r in run.results["plain"].items()}
    assert outcomes == {
        "test_a_capture_leaves_its_compile_context_set": "passed",
        "test_the_next_test_starts_without_it": "passed",
    }


@pytest.mark.parametrize("dynamic", [False, True])
def test_the_swap_forwards_dynamic(dynamic: bool) -> None:
    """``aot_function(..., dynamic=True)`` under the swap traces symbolic sizes (Note [compile_function with symbolic
    sizes]): one forward graph for two sizes, where a static swap compiles one per size."""
    import torch

    from predispatch_views.compare.pytorch_tests_plugin.predispatch_views_pt_swap import swapped_aot_function

    graphs: list[object] = []

    def fw_compiler(gm: torch.fx.GraphModule, example_inputs: object) -> object:
        graphs.append(gm)
        return gm

    compiled = swapped_aot_function(lambda x: x.sin().unbind(0), fw_compiler, dynamic=dynamic)
    for n in (3, 5):
        outs = compiled(torch.randn(2, n, requires_grad=True))
        assert type(outs[0].grad_fn).__name__ == "UnbindBackward0"
    assert len(graphs) == (1 if dynamic else 2)
