"""Note [A write to an input its own backward reads]: such a write runs in eager between compiled segments, so the
backward runs where eager's does and stock's raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import predispatch_views as pv
from predispatch_views.outcomes import GRAPHS
from tests.parity_utils import outcome

WRITES: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {
    "mul_by_a_tensor": lambda x, w: x.mul_(w),
    "sin_": lambda x, w: x.sin_(),
    "mul_through_a_view": lambda x, w: x.t().mul_(w),
    "div_by_a_tensor": lambda x, w: x.div_(w),
}
# Backward reads of the result or of nothing the write overwrites: compiled whole, no segment.
COMPILED_WHOLE: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {
    "exp_": lambda x, w: x.exp_(),
    "add_": lambda x, w: x.add_(w),
    "mul_by_a_number": lambda x, w: x.mul_(2.0),
}


def program_of(write: Callable[[torch.Tensor, torch.Tensor], Any]) -> Callable[..., Any]:
    def program(x: torch.Tensor, w: torch.Tensor) -> Any:
        write(x, w)
        return (x * 2).unbind(0)

    return program


def run(fn: Callable[..., Any], input_requires_grad: bool) -> dict[str, Any]:
    """Values, grad_fn types, requires_grad of the outputs, then the gradients of a backward through all."""
    a = torch.randn(3, 3, generator=torch.Generator().manual_seed(0), requires_grad=True)
    w = torch.randn(3, generator=torch.Generator().manual_seed(1), requires_grad=True)
    x = a.mul(1) if input_requires_grad else a.detach().clone()
    outs = fn(x, w)
    seen: dict[str, Any] = {
        "values": [o.detach() for o in outs],
        "grad_fn": [type(o.grad_fn).__name__ for o in outs],
        "requires_grad": [o.requires_grad for o in outs],
        "backward": outcome(lambda: torch.stack(outs).sum().backward()),
    }
    seen["grads"] = [None if t.grad is None else t.grad.clone() for t in (a, w)]
    return seen


def assert_same_run(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual["grad_fn"] == expected["grad_fn"] and actual["requires_grad"] == expected["requires_grad"]
    assert actual["backward"] == expected["backward"]
    torch.testing.assert_close(actual["values"], expected["values"])
    torch.testing.assert_close(actual["grads"], expected["grads"])


@pytest.mark.parametrize(
    ("name", "input_requires_grad"),
    [(name, True) for name in WRITES] + [(name, False) for name in WRITES if name != "sin_"],  # w requires grad
)
def test_a_write_its_backward_reads_runs_in_eager(name: str, input_requires_grad: bool) -> None:
    program = program_of(WRITES[name])
    expected = run(program, input_requires_grad)
    assert expected["backward"] == ("ok", None)
    torch._dynamo.reset()
    stock = run(torch.compile(program, backend="aot_eager"), input_requires_grad)
    assert stock["backward"][:2] == ("raised", "RuntimeError")  # the premise: stock saves the input, then writes it
    for compiled in (
        torch.compile(program, backend=pv.backend("aot_eager", strict=True)),
        pv.compile_function(program, inner="aot_eager", strict=True),
    ):
        torch._dynamo.reset()
        assert_same_run(run(compiled, input_requires_grad), expected)


@pytest.mark.parametrize("name", list(COMPILED_WHOLE))
def test_a_write_whose_backward_reads_no_overwritten_value_is_compiled_whole(name: str) -> None:
    program = program_of(COMPILED_WHOLE[name])
    expected = run(program, True)
    torch._dynamo.reset()
    compiled = pv.compile_function(program, inner="aot_eager", strict=True)
    assert_same_run(run(compiled, True), expected)
    inputs = torch.randn(3, 3, requires_grad=True).mul(1), torch.randn(3, requires_grad=True)
    assert not pv.explain(program, *inputs).program.segments  # one core: nothing runs in eager


def plain_program_of(write: Callable[[torch.Tensor, torch.Tensor], Any]) -> Callable[..., Any]:
    def program(x: torch.Tensor, w: torch.Tensor) -> Any:
        write(x, w)
        return (x * 2,)

    return program


@pytest.mark.parametrize("name", list(WRITES) + list(COMPILED_WHOLE))
def test_a_graph_without_view_outputs_takes_the_replay_path_only_for_such_a_write(name: str) -> None:
    """The backend hands a graph with no view output to the inner backend, as stock; one with such a write takes
    the prototype's path, where the write runs in eager (capture.writes_an_input_its_backward_reads)."""
    program = plain_program_of({**WRITES, **COMPILED_WHOLE}[name])
    expected = run(program, True)
    torch._dynamo.reset()
    GRAPHS.clear()
    actual = run(torch.compile(program, backend=pv.backend("aot_eager", strict=True)), True)
    assert_same_run({**actual, "grad_fn": expected["grad_fn"]}, expected)  # a compiled output is no eager node
    assert [outcome for _, outcome, _ in GRAPHS] == ["replayed" if name in WRITES else "no view outputs"]
