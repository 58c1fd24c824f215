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
# How the stock and prototype strategies compile a file (the module docstring of pytorch_tests.py says what each
# measures). "auto" picks by file name: the files that test AOTAutograd or functionalization themselves are run
# swapped (PyTorch's CI does not run them dynamo-wrapped either), every other file dynamo-wrapped.
MODES = ("dynamo-wrapped", "swapped")
SWAPPED_FILES = ("test_aotdispatch.py", "test_functionalization.py")


def mode_for(path: Path, requested: str = "auto") -> str:
    """The mode a file runs in: ``requested`` unless it is "auto", else by file name (SWAPPED_FILES)."""
    if requested != "auto":
        if requested not in MODES:
            raise ValueError(f"unknown mode {requested!r}: choose from auto, {', '.join(MODES)}")
        return requested
    return "swapped" if path.name in SWAPPED_FILES else "dynamo-wrapped"


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
