"""The ``torch.backends`` entry point (see __init__.py): installs a stub that imports predispatch_views on the
first compile."""

from __future__ import annotations

import warnings
from typing import Any

from predispatch_views_autoload import ORIGINAL_ATTR, flag_from_environment


def autoload() -> None:
    """The ``torch.backends`` entry point. Must never break ``import torch``."""
    try:
        if not flag_from_environment():
            return
        import torch  # the partially initialized module: _TorchCompileInductorWrapper is already defined

        wrapper_class: Any = torch._TorchCompileInductorWrapper
        if hasattr(wrapper_class.__call__, ORIGINAL_ATTR):  # the entry point is declared twice
            return
        original = wrapper_class.__call__

        def __call__(self: Any, model_: Any, inputs_: Any, **kwargs: Any) -> Any:
            import predispatch_views  # noqa: F401  (its import installs the flag's hook over this stub)

            current = wrapper_class.__call__
            if current is __call__:  # the variable was switched off since ``import torch``
                wrapper_class.__call__ = current = original
            return current(self, model_, inputs_, **kwargs)

        setattr(__call__, ORIGINAL_ATTR, original)
        wrapper_class.__call__ = __call__
    except Exception as e:
        warnings.warn(f"predispatch_views could not hook torch.compile: {type(e).__name__}: {e}", stacklevel=2)
