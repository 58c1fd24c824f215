"""Symbolic sizes for ``compile_function(dynamic=True)``: a fake mode with a shape environment, and the guards its
trace and compile recorded, checked on the next call's real inputs (as ``aot_function(dynamic=True)`` traces, and
as Dynamo checks its shape guards)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv


def symbolic_fake_mode() -> FakeTensorMode:
    """A fake mode whose ``from_tensor`` gives every size a symbol (duck-sized: equal sizes share one, and 0 and 1
    are specialized, as under Dynamo)."""
    return FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())


def shape_guard(fake_mode: FakeTensorMode, fakes: Sequence[torch.Tensor]) -> Callable[[Sequence[torch.Tensor]], bool]:
    """Whether real tensors (one per fake, in order) satisfy every guard recorded so far on the fakes' symbols,
    static sizes and strides included (a size the trace specialized to 1 must be 1 again)."""
    shape_env = fake_mode.shape_env
    assert shape_env is not None
    code = shape_env.produce_guards_expression(list(fakes), ignore_static=False)
    if code is None:
        return lambda tensors: True

    def fits(tensors: Sequence[torch.Tensor]) -> bool:
        try:
            return bool(shape_env.evaluate_guards_expression(code, list(tensors)))
        except ArithmeticError:  # ``Mod(s0, s0 // 2)`` at s0 = 1: the trace's split does not hold there either
            return False

    return fits
