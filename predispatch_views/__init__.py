"""predispatch_views: faithful multi-output views for torch.compile by eager replay of a view epilogue.

Entry points:
- ``torch.compile(fn, backend="predispatch_views")`` (no import needed once installed) or ``backend(inner=...)``
- ``compile_function(fn, inner="aot_eager")``: no Dynamo
- ``enable()`` / ``PREDISPATCH_VIEWS=1`` (no import needed once installed): route plain ``torch.compile(fn)``
  through the prototype
- ``explain(fn, *args)``: every stage's graph for one program
- ``report()``: how many graphs the backend or the flag took, fell back on, or found without view outputs
"""

from __future__ import annotations

from ._torch_support import UnsupportedTorchWarning, check_torch_release

# First: an unsupported torch gets a message saying what to do before any private torch API is imported
# (Note [Supported torch releases] in _torch_support.py).
check_torch_release()

from .backend import BACKEND_NAME, backend, register  # noqa: E402
from .compile_function import compile_function  # noqa: E402
from .explain import explain  # noqa: E402
from .flag import disable, enable, is_enabled, read_environment  # noqa: E402
from .outcomes import FALLBACKS, GRAPHS, report  # noqa: E402
from .pipeline import CompiledProgram, StrictModeError  # noqa: E402

__all__ = [
    "BACKEND_NAME",
    "FALLBACKS",
    "GRAPHS",
    "CompiledProgram",
    "StrictModeError",
    "UnsupportedTorchWarning",
    "backend",
    "compile_function",
    "disable",
    "enable",
    "explain",
    "is_enabled",
    "report",
]

register()
read_environment()
