"""The supported torch releases (Note [Supported torch releases] in predispatch_views/_torch_support.py): the range
pyproject.toml declares, the releases each private API was checked on, and the message an unsupported release gets
at ``import predispatch_views`` (tested by monkeypatching ``torch.__version__``)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from predispatch_views import _torch_internals, _torch_support
from predispatch_views._torch_support import UnsupportedTorchWarning, check_torch_release, unsupported_torch_message

ROOT = Path(__file__).resolve().parent.parent
tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _torch_requirement(requirements: list[str]) -> str:
    (found,) = [r for r in requirements if r.replace(" ", "").startswith(("torch>", "torch=", "torch<"))]
    return found.replace(" ", "")


def test_the_supported_range_is_the_one_pyproject_declares() -> None:
    project = _pyproject()
    assert _torch_requirement(project["dependencies"]) == f"torch{_torch_support.SUPPORTED_RANGE}"
    # The README's setup command, `pip install -e ".[test]"`, installs the default pin.
    assert _torch_requirement(project["optional-dependencies"]["test"]) == f"torch=={_torch_support.DEFAULT_PIN}"


def test_every_private_api_names_checked_releases_only() -> None:
    assert _torch_internals.CHECKED_ON
    for api, releases in _torch_internals.CHECKED_ON.items():
        assert releases, api
        assert set(releases) <= set(_torch_support.CHECKED_RELEASES), api
    for release in _torch_support.CHECKED_RELEASES:
        assert unsupported_torch_message(release) is None, release


@pytest.mark.parametrize("version", ["2.13.0", "2.13.0+cpu", "2.14.0", "2.14.1+cu130"])
def test_a_supported_release_imports_silently(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    monkeypatch.setattr(torch, "__version__", version)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_torch_release()


@pytest.mark.parametrize("version", ["2.12.1", "2.12.0+cpu", "1.13.1"])
def test_an_older_release_fails_at_import_saying_what_to_do(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    monkeypatch.setattr(torch, "__version__", version)
    with pytest.raises(ImportError) as raised:
        check_torch_release()
    message = str(raised.value)
    assert f"supports torch >=2.13.0,<2.15 (its test suite passes on 2.13.0 and 2.14.1); torch {version}" in message
    assert 'pip install "torch>=2.13.0,<2.15"' in message


@pytest.mark.parametrize("version", ["2.15.0", "2.15.0.dev20260301+cpu", "2.15.0a0+git1234", "3.0.0", "nightly"])
def test_a_newer_or_unreadable_release_warns(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    monkeypatch.setattr(torch, "__version__", version)
    with pytest.warns(UnsupportedTorchWarning, match=re.escape(f"torch {version} is installed")) as caught:
        check_torch_release()
    assert len(caught) == 1
    assert "supports torch >=2.13.0,<2.15" in str(caught[0].message)


def test_import_checks_the_release_before_anything_else() -> None:
    """``import predispatch_views`` itself, in a fresh process: an older torch raises ImportError (and nothing of the
    engine was imported), a newer one warns and the package is imported."""
    script = textwrap.dedent(
        """
        import sys, warnings
        import torch
        torch.__version__ = "2.12.1"
        try:
            import predispatch_views
        except ImportError as e:
            print("older:", "supports torch >=2.13.0,<2.15" in str(e), "predispatch_views.pipeline" in sys.modules)
        torch.__version__ = "2.15.0"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import predispatch_views
        print("newer:", [type(w.message).__name__ for w in caught if "supports torch" in str(w.message)])
        print("imported:", predispatch_views.BACKEND_NAME, "predispatch_views.pipeline" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "older: True False",
        "newer: ['UnsupportedTorchWarning']",
        "imported: predispatch_views True",
    ]


def test_the_dropout_feature_check_predicts_stock() -> None:
    """Where AOTAutograd traces dropout in eval as its input, stock's multi-output views of it, taken from a graph
    input, are views of that input; where it traces a clone, they are not views at all (the unsafe fix)."""
    x = torch.randn(3, 2, requires_grad=True).mul(1)
    outs = torch.compile(lambda t: torch.nn.functional.dropout(t, 0.5, False).unbind(0), backend="aot_eager")(x)
    assert outs[0]._is_view() == (outs[0]._base is x) == _torch_internals.eval_dropout_is_traced_as_its_input()
