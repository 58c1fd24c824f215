"""Checks of ``compare``'s arguments, all made before any case runs: a typo must not cost minutes of work or
write a table that looks like a result."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch


class ArgumentError(Exception):
    """A bad argument, reported in one line with exit status 2."""


# Resolved by the pipeline without Dynamo's registry (pipeline.resolve_inner), and always available.
BUILTIN_INNERS = ("inductor", "aot_eager", "eager")


def check_inners(inners: tuple[str, ...]) -> None:
    if not inners:
        raise ArgumentError("--inner names no backend")
    known = set(BUILTIN_INNERS) | set(torch._dynamo.list_backends(exclude_tags=()))
    unknown = [i for i in inners if i not in known]
    if unknown:
        raise ArgumentError(f"unknown inner backend {', '.join(map(repr, unknown))}; known: {', '.join(sorted(known))}")


def check_device(device: str) -> torch.device:
    try:
        parsed = torch.device(device)
    except RuntimeError as e:
        raise ArgumentError(f"--device {device!r}: {e}") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ArgumentError(f"--device {device}: CUDA is not available on this machine (torch {torch.__version__})")
    try:
        torch.ones(1, device=parsed).add_(1).item()
    except Exception as e:
        raise ArgumentError(f"--device {device}: cannot run a tensor op there: {type(e).__name__}: {e}") from None
    return parsed


def check_cases(pattern: str | None, slow: bool) -> None:
    if pattern is None:
        return
    from .cases import CASES, select_cases

    if not select_cases(slow=slow, pattern=pattern):
        hint = " (some are --slow only)" if select_cases(slow=True, pattern=pattern) else ""
        raise ArgumentError(
            f"--cases {pattern!r} matches no case{hint}; case names: {', '.join(c.name for c in CASES)}"
        )


def check_out_dir(out: str) -> Path:
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise ArgumentError(f"--out {out}: not a writable folder ({e.strerror or e})") from None
    return path


def check_pytorch_tests(path: str | None, strategies: str) -> None:
    if path is None:
        return
    from .pytorch_test_files import DEFAULT_FILES, STRATEGIES, find_test_files

    if not Path(path).exists():
        raise ArgumentError(f"--pytorch-tests {path}: no such file or folder")
    if not find_test_files(Path(path)):
        raise ArgumentError(f"--pytorch-tests {path}: no test file there (looked for {', '.join(DEFAULT_FILES)})")
    unknown = [s for s in strategies.split(",") if s.strip() and s.strip() not in STRATEGIES]
    if unknown or not strategies.strip():
        raise ArgumentError(f"--pytorch-tests-strategies {strategies!r}: choose from {', '.join(STRATEGIES)}")


def check_models(args: argparse.Namespace) -> None:
    """--models-only names, --models-inner / --models-flag-inner backends, --models-steps."""
    only = getattr(args, "models_only", None)
    if only:
        from .model_suite import SUITE, unknown_names

        unknown = unknown_names(only)
        if unknown:
            names = ", ".join(c.name for c in SUITE)
            raise ArgumentError(f"--models-only: unknown model {', '.join(map(repr, unknown))}; models: {names}")
    inners = (getattr(args, "models_inner", None), getattr(args, "models_flag_inner", None))
    for option, text in zip(("--models-inner", "--models-flag-inner"), inners):
        if text and text != "none":
            try:
                check_inners(tuple(i.strip() for i in text.split(",") if i.strip()))
            except ArgumentError as e:
                raise ArgumentError(f"{option}: {e}") from None
    steps = getattr(args, "models_steps", 10)
    if steps < 1:
        raise ArgumentError(f"--models-steps {steps}: at least 1")


def check_compare_arguments(args: argparse.Namespace) -> Path:
    """Every check; returns the output folder (created)."""
    check_inners(tuple(args.inners))
    if getattr(args, "perf_inner", None):
        check_inners(tuple(i.strip() for i in args.perf_inner.split(",") if i.strip()))
    if getattr(args, "models", False):
        check_models(args)
    check_device(args.device)
    check_cases(args.cases, bool(args.slow))
    check_pytorch_tests(getattr(args, "pytorch_tests", None), getattr(args, "pytorch_tests_strategies", ""))
    return check_out_dir(args.out)
