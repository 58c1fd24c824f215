"""Which torch releases the project supports, checked at ``import predispatch_views``.

This module imports no private torch API, so that the check runs (and says what to do) before
``_torch_internals`` imports them: on an unsupported release those imports may be the first thing to fail.

Note [Supported torch releases]
pyproject.toml declares ``torch>=2.13.0,<2.15`` (``SUPPORTED_RANGE``): the engine relies on private torch APIs
(``_torch_internals.CHECKED_ON`` names the releases each was checked on), and the suite passes on 2.13.0 and
2.14.1 (``CHECKED_RELEASES``; CI runs both). The README's setup, ``pip install -e ".[test]"``, installs the default
pin, 2.13.0, through the ``test`` extra. At import:
- a release older than 2.13 raises ImportError (pip would not install the package next to it; the private APIs
  are older than any release the engine was checked on);
- a release newer than 2.14 (2.15 nightlies included) warns ``UnsupportedTorchWarning`` and goes on: the engine may
  work, but a torch change may also make it silently different from eager, which is what the project promises
  never to be. Run the test suite on that release before relying on it.
"""

from __future__ import annotations

import re
import warnings

import torch

SUPPORTED_RANGE = ">=2.13.0,<2.15"  # pyproject.toml's dependency on torch (a test checks they agree)
OLDEST_SUPPORTED = (2, 13, 0)
NEWEST_SUPPORTED_MINOR = (2, 14)
CHECKED_RELEASES = ("2.13.0", "2.14.1")  # the releases the test suite passed on
DEFAULT_PIN = "2.13.0"  # what the README's setup command installs (the ``test`` extra)

_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


class UnsupportedTorchWarning(UserWarning):
    """The installed torch is newer than any release the engine was checked on."""


def torch_release(version: str) -> tuple[int, int, int] | None:
    """(major, minor, micro) of a torch version string (``2.14.1+cu130``, ``2.15.0.dev20260101``), else None."""
    match = _RELEASE.match(str(version))
    if match is None:
        return None
    major, minor, micro = match.groups()
    return int(major), int(minor), int(micro or 0)


def _what_to_do(version: str) -> str:
    checked = " and ".join(CHECKED_RELEASES)
    return (
        f"predispatch_views supports torch {SUPPORTED_RANGE} (its test suite passes on {checked}); torch {version} "
        "is installed. The engine relies on private torch APIs that change between releases "
        "(predispatch_views/_torch_internals/). Install a supported torch, e.g. "
        f'`pip install "torch{SUPPORTED_RANGE}"` (or the default pin: `pip install -e ".[test]"` installs torch '
        f"{DEFAULT_PIN})"
    )


def unsupported_torch_message(version: str) -> tuple[str, bool] | None:
    """None when ``version`` is supported; else (the message, whether importing must fail)."""
    release = torch_release(version)
    if release is None:
        return f"{_what_to_do(version)}. The version string could not be read.", False
    if release < OLDEST_SUPPORTED:
        return f"{_what_to_do(version)}.", True
    if release[:2] > NEWEST_SUPPORTED_MINOR:
        return (
            f"{_what_to_do(version)}. This release is newer than any the engine was checked on: it may work, or "
            "a torch change may make the prototype differ from eager; run the test suite (`python -m pytest -q`) "
            "on it before relying on it.",
            False,
        )
    return None


def check_torch_release(version: str | None = None) -> None:
    """Raise ImportError for a torch older than the supported range, warn for a newer one."""
    found = unsupported_torch_message(torch.__version__ if version is None else version)
    if found is None:
        return
    message, fatal = found
    if fatal:
        raise ImportError(message)
    warnings.warn(message, UnsupportedTorchWarning, stacklevel=2)
