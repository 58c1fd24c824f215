"""Whether a call runs inside someone else's trace (make_fx, AOTAutograd, Dynamo), asked of private torch APIs."""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.fx.experimental.proxy_tensor import get_proxy_mode


def under_a_trace(values: list[Any]) -> bool:
    """True while Dynamo, make_fx or AOTAutograd traces the caller: a compiled entry point called there should
    run its function's own code, so that the enclosing trace records the function's ops (a compiled program is
    opaque to it and compiling again inside a trace draws on the trace's modes)."""
    if torch.compiler.is_compiling() or get_proxy_mode() is not None:
        return True
    return any(isinstance(v, (FakeTensor, FunctionalTensor)) for v in values)
