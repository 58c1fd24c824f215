"""``python -m predispatch_views explain MODULE:FUNCTION --args ...``: explain() from the command line."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import Any

import torch

from .explain import explain

_FACTORIES = [
    "arange",
    "empty",
    "eye",
    "full",
    "linspace",
    "ones",
    "rand",
    "randint",
    "randn",
    "randperm",
    "tensor",
    "zeros",
    "empty_like",
    "full_like",
    "ones_like",
    "rand_like",
    "randn_like",
    "zeros_like",
]
_DTYPES = [
    "bfloat16",
    "bool",
    "complex64",
    "complex128",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
]


def _evaluate(text: str, template: str, option: str) -> Any:
    scope: dict[str, Any] = {name: getattr(torch, name) for name in _FACTORIES}
    scope.update({name: getattr(torch, name) for name in _DTYPES})
    scope["torch"] = torch
    scope["__builtins__"] = {"range": range, "list": list, "tuple": tuple, "int": int, "float": float, "dict": dict}
    try:
        return eval(template.format(text), scope)
    except Exception as e:
        raise UsageError(f"{option} {text!r}: {type(e).__name__}: {e}") from None


def parse_args_expression(text: str) -> list[Any]:
    """``"randn(3, 4, requires_grad=True), ones(2)"`` -> the values, with torch's factories in scope."""
    return list(_evaluate(text, "({},)", "--args")) if text.strip() else []


def parse_kwargs_expression(text: str) -> dict[str, Any]:
    """``"dim=1, scale=ones(3)"`` -> the keyword arguments, same scope as ``parse_args_expression``."""
    return dict(_evaluate(text, "dict({})", "--kwargs")) if text.strip() else {}


def load_function(spec: str) -> Callable[..., Any]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"expected MODULE:FUNCTION, got {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"cannot import module {module_name!r}: {e}") from None
    except Exception as e:  # the module raised while being imported
        raise UsageError(f"importing {module_name!r} raised {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{module_name}:{attr}: {getattr(obj, '__name__', repr(obj))} has no attribute {part!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{module_name}:{attr} is a {type(obj).__name__}, not a function")
    return obj


def add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("function", metavar="MODULE:FUNCTION", help="e.g. mypkg.models:f")
    parser.add_argument(
        "--args",
        default="",
        help='comma-separated expressions with torch factories in scope, e.g. "randn(50, 50, requires_grad=True)"',
    )
    parser.add_argument(
        "--kwargs",
        default="",
        help='keyword arguments, same scope as --args, e.g. "dim=1, scale=ones(3)"',
    )
    parser.add_argument("--inner", default="aot_eager", help="inner backend for the core and for stock")
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed before evaluating --args")
    parser.set_defaults(run=run_explain)


class UsageError(Exception):
    """A bad target or argument expression, reported in one line with exit status 2."""


def run_explain(args: argparse.Namespace) -> int:
    """Exit status: 0, 1 when the program or its compilation raised (see the errors section), 2 on bad input."""
    from .compare.validate import ArgumentError, check_inners

    try:
        check_inners((args.inner,))
        fn = load_function(args.function)
        torch.manual_seed(args.seed)
        values = parse_args_expression(args.args)
        kwargs = parse_kwargs_expression(args.kwargs)
    except (UsageError, ArgumentError) as e:
        print(f"explain: error: {e}", file=sys.stderr)
        return 2
    explanation = explain(fn, *values, inner=args.inner, **kwargs)
    print(explanation, end="")
    for error in explanation.errors:
        print(f"explain: {error}", file=sys.stderr)
    return 1 if explanation.errors else 0
