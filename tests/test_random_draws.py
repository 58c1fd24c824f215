"""Note [Random draws nothing reads]: the global generator ends a compiled call where eager's does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import predispatch_views as pv


def dead_bernoulli_through_a_view(b: torch.Tensor, c: torch.Tensor) -> Any:  # fuzzer s1804_61's shape
    t0 = b @ b.t()
    t0.reshape(t0.shape).bernoulli_(0.5)
    return c.mul(2).chunk(2, 1)


def dead_draws_without_views(b: torch.Tensor, c: torch.Tensor) -> Any:
    b.mul(2).uniform_()
    torch.rand(3)
    F.dropout(c, 0.5, True)
    return c.sin()


def dead_normal_then_a_live_draw(b: torch.Tensor, c: torch.Tensor) -> Any:
    b.sin().normal_()
    return torch.rand_like(c).mul(c).unbind(0)


PROGRAMS = [dead_bernoulli_through_a_view, dead_draws_without_views, dead_normal_then_a_live_draw]


def after_the_call(fn: Callable[..., Any], requires_grad: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The next random numbers after one seeded call, and the call's outputs."""
    inputs = [torch.randn(3, 4, generator=torch.Generator().manual_seed(k)) for k in range(2)]
    torch.manual_seed(1234)
    outs = fn(*[t.requires_grad_(requires_grad) for t in inputs])
    return torch.rand(4), [o.detach() for o in outs] if isinstance(outs, tuple) else [outs.detach()]


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_the_generator_ends_where_eagers_does(program: Callable[..., Any], requires_grad: bool) -> None:
    expected, expected_outs = after_the_call(program, requires_grad)
    torch._dynamo.reset()
    stock, _ = after_the_call(torch.compile(program, backend="aot_eager"), requires_grad)
    assert not torch.equal(stock, expected)  # the premise: stock's AOTAutograd drops the draw nothing reads
    for compiled in (
        torch.compile(program, backend=pv.backend("aot_eager")),
        torch.compile(program, backend=pv.backend("aot_eager"), dynamic=True),
        pv.compile_function(program, inner="aot_eager"),
    ):
        torch._dynamo.reset()
        actual, outs = after_the_call(compiled, requires_grad)
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)
        torch.testing.assert_close(outs, expected_outs)


def test_a_callable_inner_backend_is_called_as_it_is() -> None:
    seen: list[bool] = []

    def inner(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen.append(torch._inductor.config.fallback_random)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(dead_draws_without_views, backend=pv.backend(inner))(torch.randn(3, 4), torch.randn(3, 4))
    assert seen == [False]


def dead_dropout_then_a_no_grad_view(b: torch.Tensor, c: torch.Tensor) -> Any:  # fuzzer s1808_1837's shape
    t0 = c.exp()
    F.dropout(b, 0.5, True)
    with torch.no_grad():
        return t0.t()


def test_a_kept_draw_the_partitioner_refuses_runs_uncompiled() -> None:
    """Note [A kept draw the partitioner refuses]: the joint graph has no backward node, the kept ``native_dropout``
    no user; AOTAutograd's default partitioner raises, and the graph runs uncompiled, drawing as eager does."""
    from predispatch_views.fallbacks import FallbackKind
    from predispatch_views.inner_backend import inner_or_uncompiled, resolve_inner
    from predispatch_views.program import CompiledProgram

    programs: list[CompiledProgram] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        with pytest.raises(AssertionError, match="Expected native_dropout to be a tensor"):  # the premise
            resolve_inner("aot_eager")(gm, example_inputs)
        programs.append(CompiledProgram(run=gm.forward))
        return inner_or_uncompiled(programs[-1], gm, example_inputs, resolve_inner("aot_eager"), strict=False)

    expected, expected_outs = after_the_call(dead_dropout_then_a_no_grad_view, True)
    torch._dynamo.reset()
    actual, outs = after_the_call(torch.compile(dead_dropout_then_a_no_grad_view, backend=backend), True)
    (program,) = programs
    assert program.fallback is not None and program.fallback.kind is FallbackKind.INNER_BACKEND_REJECTED
    assert "random draw nothing reads" in program.fallback.reason
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    torch.testing.assert_close(outs, expected_outs)
