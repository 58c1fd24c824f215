"""Which PyTorch test files ``compare --pytorch-tests`` runs, and its strategies' names.

Apart from pytorch_tests.py so that checking the arguments (validate.py, which the engine's ``explain`` imports)
does not import the runner and its pytest plugin, which imports the package (no import circle).
"""

from __future__ import annotations

from pathlib import Path

# The files issue 21 names, relative to a PyTorch source tree's root.
DEFAULT_FILES = (
    "test/test_view_ops.py",
    "test/test_functionalization.py",
    "test/functorch/test_aotdispatch.py",
    "test/test_autograd.py",
)
STRATEGIES = ("plain", "stock", "prototype")


def find_test_files(path: Path) -> list[Path]:
    """A test file itself, or the DEFAULT_FILES present under a source tree root (or under its test/ folder)."""
    if path.is_file():
        return [path.resolve()]
    found = []
    for rel in DEFAULT_FILES:
        for candidate in (path / rel, path / rel.removeprefix("test/")):
            if candidate.is_file():
                found.append(candidate.resolve())
                break
    return found
