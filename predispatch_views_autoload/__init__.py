"""``PREDISPATCH_VIEWS=1`` without importing predispatch_views: a hook ``import torch`` runs (hook.py).

torch loads every entry point of the ``torch.backends`` group at the end of ``import torch`` (meant for
out-of-tree device extensions; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns the mechanism off). The package
declares ``hook.autoload`` in that group. It runs while torch is still initializing, so it imports nothing of
predispatch_views: when the variable is unset or off it returns at once; when it is on, it swaps
``torch._TorchCompileInductorWrapper.__call__`` (what plain ``torch.compile`` calls for every captured graph)
for a stub that imports predispatch_views on the first compile. That import reads the variable and installs
the real hook (flag.py), which takes the original method from the stub.

This package lives outside predispatch_views so that loading it does not import predispatch_views. This module
holds what both sides read (the variable, the stub's attribute); the stub itself is in hook.py, which nothing
imports, so predispatch_views -> flag -> here is no import circle.
"""

from __future__ import annotations

import os
import sys
import warnings

ENV_VAR = "PREDISPATCH_VIEWS"
ON_VALUES = ("1", "true", "yes", "on")
OFF_VALUES = ("", "0", "false", "no", "off")
# The attribute of the stub that holds torch's own method.
ORIGINAL_ATTR = "_predispatch_views_original"
_warned: set[str] = set()


def flag_from_environment() -> bool:
    """Whether the variable turns the flag on; an unknown value warns (once) and leaves it off."""
    raw = os.environ.get(ENV_VAR, "")
    value = raw.strip().lower()
    if value in ON_VALUES:
        return True
    if value not in OFF_VALUES and raw not in _warned:
        _warned.add(raw)
        # The value comes from the user's command, not from a line of this package: say so where the warning is.
        command = " ".join(sys.argv) if sys.argv and sys.argv[0] else "python"
        warnings.warn_explicit(
            f"{ENV_VAR}={raw!r} is not understood; the flag stays off. "
            f"Accepted: {', '.join(ON_VALUES)} (on), {', '.join(v for v in OFF_VALUES if v)} or unset (off).",
            UserWarning,
            filename=f"the environment of `{ENV_VAR}={raw} {command}`",
            lineno=0,
        )
    return False
