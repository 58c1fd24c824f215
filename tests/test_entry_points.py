"""First contact, each in a fresh interpreter: the backend by name with no import (also in a spawn worker), and
``PREDISPATCH_VIEWS`` with no import.

Entry points come from an installed distribution's metadata. So that these tests check this checkout's
pyproject.toml (not whatever an older ``pip install -e`` left in site-packages), each subprocess gets a
dist-info built from pyproject.toml on PYTHONPATH, ahead of the installed one (importlib.metadata takes the first
distribution of a name on sys.path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent

# A program whose outputs are views only with the prototype: stock AOTAutograd hides the aliasing of an
# intermediate's unbind (the unsafe fix), so its outputs are not views and their grad_fn is CompiledFunctionBackward.
# Inductor (the default inner backend, and plain torch.compile's) is replaced by aot_eager: no C++ compiler runs.
PROGRAM = """
import sys
import torch
import torch._inductor.compile_fx as compile_fx_module
from torch._dynamo.backends.debugging import aot_eager

compile_fx_module.compile_fx = lambda gm, inputs, **kwargs: aot_eager(gm, inputs)

def f(x):
    return x.mul(2).unbind(0)

def outputs_of(compiled):
    x = torch.randn(3, 3, requires_grad=True)
    outs = compiled(x)
    return type(outs[0].grad_fn).__name__, outs[0]._is_view()
"""


def make_dist_info(tmp: Path, groups: tuple[str, ...]) -> Path:
    """A dist-info of this checkout holding only the given entry-point groups of pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dist = tmp / f"predispatch_views-{project['version']}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = []
    for group in groups:
        lines.append(f"[{group}]")
        lines += [f"{name} = {value}" for name, value in project["entry-points"][group].items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return tmp


def run_python(code: str, tmp: Path, groups: tuple[str, ...], **env: str) -> subprocess.CompletedProcess[str]:
    site = make_dist_info(tmp / "site", groups)
    script = tmp / "script.py"
    script.write_text(textwrap.dedent(PROGRAM) + textwrap.dedent(code))
    full_env = {k: v for k, v in os.environ.items() if k != "PREDISPATCH_VIEWS"}
    full_env.update(PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), OMP_NUM_THREADS="1", **env)
    return subprocess.run(
        [sys.executable, str(script)], env=full_env, capture_output=True, text=True, timeout=300, cwd=tmp
    )


def test_backend_by_name_without_import_and_in_spawn_workers(tmp_path: Path) -> None:
    # Entry point first in the parent; package import first, then the name, in a spawn worker.
    result = run_python(
        """
        def worker(_):
            import predispatch_views  # noqa: F401
            return outputs_of(torch.compile(f, backend="predispatch_views"))

        if __name__ == "__main__":
            print("parent", outputs_of(torch.compile(f, backend="predispatch_views")))
            assert "predispatch_views" in sys.modules
            import multiprocessing
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                print("worker", pool.map(worker, [0])[0])
        """,
        tmp_path,
        ("torch_dynamo_backends",),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["parent ('UnbindBackward0', True)", "worker ('UnbindBackward0', True)"]
    assert "Traceback" not in result.stderr


def test_flag_from_environment_without_import(tmp_path: Path) -> None:
    # No torch_dynamo_backends entry point in this process: the package import registers the name itself.
    result = run_python(
        """
        print("before", "predispatch_views" in sys.modules)
        print("flag", outputs_of(torch.compile(f)))
        print("after", "predispatch_views" in sys.modules)
        print("named", outputs_of(torch.compile(lambda x: f(x), backend="predispatch_views")))
        """,
        tmp_path,
        ("torch.backends",),
        PREDISPATCH_VIEWS="1",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "before False",
        "flag ('UnbindBackward0', True)",
        "after True",
        "named ('UnbindBackward0', True)",
    ]
    assert "Warning" not in result.stderr


def test_unknown_flag_value_warns_once(tmp_path: Path) -> None:
    result = run_python(
        """
        import predispatch_views
        print("enabled", predispatch_views.is_enabled())
        """,
        tmp_path,
        ("torch.backends",),
        PREDISPATCH_VIEWS="maybe",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["enabled False"]
    warnings = [line for line in result.stderr.splitlines() if "PREDISPATCH_VIEWS='maybe' is not understood" in line]
    assert len(warnings) == 1, result.stderr  # at ``import torch``; the package import does not repeat it
    assert "Accepted: 1, true, yes, on (on), 0, false, no, off or unset (off)" in warnings[0]
    assert warnings[0].startswith("the environment of `PREDISPATCH_VIEWS=maybe "), warnings[0]  # not a package line
    assert "predispatch_views_autoload" not in result.stderr


def test_the_flag_is_visible_when_it_engages(tmp_path: Path) -> None:
    # With TORCH_LOGS=predispatch_views a user sees one line per graph and, at exit, the summary; off, nothing.
    code = """
        compiled = torch.compile(f)
        print("views", outputs_of(compiled))
        print("plain", torch.compile(lambda x: x.mul(2))(torch.randn(3)).shape)
        """
    on = run_python(code, tmp_path / "on", ("torch.backends",), PREDISPATCH_VIEWS="1", TORCH_LOGS="predispatch_views")
    off = run_python(code, tmp_path / "off", ("torch.backends",), TORCH_LOGS="predispatch_views")
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    graph_lines = [
        line for line in on.stderr.splitlines() if "[predispatch_views]" in line or "predispatch_views" in line
    ]
    assert any("replayed (view calls unbind x1, sliced from Dynamo's graph)" in line for line in graph_lines), on.stderr
    assert any(": no view outputs" in line for line in graph_lines), on.stderr
    assert "predispatch_views: 2 graphs compiled" in on.stderr and "replayed: 1" in on.stderr, on.stderr
    assert "graphs compiled" not in off.stderr and "replayed" not in off.stderr, off.stderr


def test_report_counts_outcomes() -> None:
    import torch

    import predispatch_views
    from predispatch_views import pipeline

    pipeline.GRAPHS.clear()
    be = predispatch_views.backend("aot_eager")
    torch.compile(lambda x: x.mul(2).unbind(0), backend=be)(torch.randn(2, 2, requires_grad=True))
    torch.compile(lambda x: x.mul(2), backend=be)(torch.randn(2))

    def inference_region_then_views(x):
        with torch.inference_mode():
            z = x * 2
        return (x.mul(2) + 1).unbind(0), z

    # An inference_mode region inside the graph: a fallback (pre-dispatch tracing does not record it).
    torch.compile(inference_region_then_views, backend=be)(torch.randn(2, 2, requires_grad=True))
    assert [outcome for _, outcome, _ in pipeline.GRAPHS] == ["replayed", "no view outputs", "fallback"]
    text = predispatch_views.report()
    assert text.splitlines()[:4] == [
        "predispatch_views: 3 graphs compiled",
        "  replayed: 1",
        "  fallback: 1",
        "  no view outputs: 1",
    ]
    assert "an inference_mode region inside the graph" in text, text
