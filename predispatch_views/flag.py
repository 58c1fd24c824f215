"""The experimental flag: route plain ``torch.compile(fn)`` (default inductor backend) through the prototype.

How it hooks in: plain ``torch.compile`` wraps inductor in ``torch._TorchCompileInductorWrapper``, whose
``__call__(gm, example_inputs)`` Dynamo invokes for every graph it captures. ``enable()`` swaps that method for
one that runs the predispatch_views pipeline with the original method (inductor, with the user's mode and
options) as the inner backend; when the flag is off the original runs unchanged. The flag is read when Dynamo
compiles (the first call of a compiled function, or a recompile), so a function compiled under the flag keeps
its prototype graph after the flag is turned off, until ``torch._dynamo.reset()``.

Turn it on with ``with predispatch_views.enable(): ...`` or ``PREDISPATCH_VIEWS=1`` in the environment when the
package is imported; turn it off by leaving the block, ``predispatch_views.disable()`` or ``PREDISPATCH_VIEWS=0``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from predispatch_views_autoload import ENV_VAR, ORIGINAL_ATTR, flag_from_environment

from . import _torch_internals as ti
from .outcomes import GRAPHS, report
from .pipeline import compile_dynamo_graph

__all__ = ["ENV_VAR", "disable", "enable", "is_enabled", "read_environment", "set_enabled"]
_state = {"enabled": False, "installed": False}


def _install() -> None:
    if _state["installed"]:
        return
    wrapper_class = ti.inductor_wrapper_class()
    # The stub predispatch_views_autoload put there at ``import torch`` keeps torch's own method.
    original = getattr(wrapper_class.__call__, ORIGINAL_ATTR, wrapper_class.__call__)

    def __call__(self: Any, model_: Any, inputs_: Any, **kwargs: Any) -> Any:  # kwargs: config_patches
        if not _state["enabled"]:
            return original(self, model_, inputs_, **kwargs)

        def inner(gm: Any, example_inputs: Any) -> Any:
            return original(self, gm, example_inputs, **kwargs)

        return compile_dynamo_graph(model_, inputs_, inner).run

    wrapper_class.__call__ = __call__
    # Note [An inlined Function returns its input as eager does] (dynamo_traced_code.py), while the flag is on.
    ti.install_inlined_function_returns(lambda fn: _state["enabled"] and isinstance(fn, wrapper_class))
    _state["installed"] = True
    atexit.register(_summary_at_exit)


def _summary_at_exit() -> None:
    """Under the flag, the run's summary (report()) at INFO: the flag is seen working, not only failing."""
    if GRAPHS:
        logging.getLogger("predispatch_views").info("%s", report())


def is_enabled() -> bool:
    return bool(_state["enabled"])


def set_enabled(enabled: bool) -> None:
    if enabled:
        _install()
    _state["enabled"] = enabled


def disable() -> None:
    set_enabled(False)


@contextlib.contextmanager
def enable(enabled: bool = True) -> Iterator[None]:
    previous = is_enabled()
    set_enabled(enabled)
    try:
        yield
    finally:
        set_enabled(previous)


def read_environment() -> None:
    """Turn the flag on if ``PREDISPATCH_VIEWS`` says so; warn on a value it does not understand."""
    if flag_from_environment():
        set_enabled(True)
