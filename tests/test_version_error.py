"""Note [Eager's version error]: a compiled output eager's node saved, written by the caller, then a backward: the
prototype raises eager's error, naming eager's node, where stock's message names none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import predispatch_views as pv
from tests.parity_utils import outcome

SAVING_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "exp": torch.exp,
    "relu": torch.relu,
    "method_sqrt": lambda a: a.abs().add(1).sqrt(),
}


def with_views(op: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
    def program(a: torch.Tensor, b: torch.Tensor) -> Any:
        t0 = op(a)
        return (t0, *t0.mul(2).unbind(0), b.sin())

    return program


def without_views(op: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
    def program(a: torch.Tensor, b: torch.Tensor) -> Any:
        t0 = op(a)
        return t0, t0.mul(2), b.sin()

    return program


def written_then_backward(fn: Callable[..., Any], through: slice) -> Any:
    """Write output 0 in place, then a backward through ``outputs[through]``: the outcome and the gradients."""
    a = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)
    b = torch.randn(3, generator=torch.Generator().manual_seed(1), requires_grad=True)
    outs = fn(a.mul(1), b.mul(1))
    outs[0].mul_(2)
    result = outcome(lambda: torch.stack([o.sum() for o in outs[through]]).sum().backward())
    return result, [None if t.grad is None else t.grad.clone() for t in (a, b)]


def compiled(entry: str, program: Callable[..., Any]) -> Callable[..., Any]:
    torch._dynamo.reset()
    if entry == "compile_function":
        return pv.compile_function(program, inner="aot_eager", strict=True)
    return torch.compile(program, backend=pv.backend("aot_eager", strict=True))


@pytest.mark.parametrize("shape", [with_views, without_views], ids=lambda f: f.__name__)
@pytest.mark.parametrize("entry", ["backend", "compile_function"])
@pytest.mark.parametrize("op", list(SAVING_OPS))
def test_eagers_error_names_the_node_that_saved_the_output(op: str, entry: str, shape: Callable[..., Any]) -> None:
    program = shape(SAVING_OPS[op])
    expected = written_then_backward(program, slice(None))
    assert expected[0][0] == "raised" and ", which is output 0 of " in expected[0][2]
    torch._dynamo.reset()
    stock = written_then_backward(torch.compile(program, backend="aot_eager"), slice(None))
    assert stock[0][:2] == expected[0][:2] and stock[0][2] != expected[0][2]  # the premise: stock names no node
    actual = written_then_backward(compiled(entry, program), slice(None))
    assert actual[0] == expected[0]


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
def test_a_backward_that_never_reaches_the_saving_node_runs(entry: str) -> None:
    """Through ``b.sin()`` alone eager's backward never reaches the node that saved the written output (another part
    of the core: Note [Independent parts of the core]); neither does the prototype's."""
    program = with_views(torch.tanh)
    expected = written_then_backward(program, slice(-1, None))
    assert expected[0] == ("ok", None)
    actual = written_then_backward(compiled(entry, program), slice(-1, None))
    assert actual[0] == expected[0]
    torch.testing.assert_close(actual[1], expected[1])


def test_no_write_no_error_and_the_same_gradients() -> None:
    program = with_views(torch.sigmoid)

    def run(fn: Callable[..., Any]) -> list[torch.Tensor]:
        a = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)
        torch.stack([o.sum() for o in fn(a, torch.ones(3))]).sum().backward()
        return [a.grad]

    torch.testing.assert_close(run(compiled("backend", program)), run(program))


def test_under_anomaly_detection_too() -> None:
    """Anomaly mode changes the hint, and made the op facts' trace fail (cached as "unknown" for the process)."""
    program = with_views(torch.tanh)
    with torch.autograd.set_detect_anomaly(True):
        expected = written_then_backward(program, slice(None))
        actual = written_then_backward(compiled("backend", program), slice(None))
    assert "Good luck!" in expected[0][2] and actual[0] == expected[0]


# Note [A saved alias of a value the caller can write]: a core node's backward saves an alias of a returned value.
INPUT_SAVERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sin": torch.sin,
    "mul_self": lambda t: t * t,
    "pow": lambda t: t.pow(3),
    "method_cos": lambda t: t.cos(),
}
RETURNED_ALIASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "transpose": lambda t: t.transpose(1, 0),
    "narrow": lambda t: t[1:],
    "the_base": lambda t: t,
}


def saving_an_alias(saver: Callable[..., torch.Tensor], alias: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    def program(a: torch.Tensor) -> Any:
        t1 = alias(a.sum(2))
        return t1, saver(t1), a.mul(2), t1[0]  # a returned view: the graph is the prototype's, not stock's

    return program


def alias_written_then_backward(fn: Callable[..., Any], through: tuple[int, ...]) -> Any:
    a = torch.randn(2, 3, 2, generator=torch.Generator().manual_seed(0), requires_grad=True)
    outs = fn(a)
    outs[0].mul_(2)
    result = outcome(lambda: torch.stack([outs[k].sum() for k in through]).sum().backward())
    return result[:2], None if a.grad is None else a.grad.clone()


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
@pytest.mark.parametrize("alias", list(RETURNED_ALIASES))
@pytest.mark.parametrize("saver", list(INPUT_SAVERS))
def test_a_saved_alias_of_a_written_output_raises_only_where_eager_reaches_the_saver(
    saver: str, alias: str, entry: str
) -> None:
    """Through the written output alone, eager's backward never reaches the saver and runs (the prototype's compiled
    backward used to raise: fuzzer s1808_2663); through the saver's output too, eager raises and so does the
    prototype (stock runs silently there: its saved alias never sees the write)."""
    program = saving_an_alias(INPUT_SAVERS[saver], RETURNED_ALIASES[alias])
    for through in [(0, 2), (0, 1, 2)]:
        expected = alias_written_then_backward(program, through)
        assert expected[0] == (("ok", None) if through == (0, 2) else ("raised", "RuntimeError"))
        actual = alias_written_then_backward(compiled(entry, program), through)
        assert actual[0] == expected[0], through
        if expected[0][0] == "ok":
            torch.testing.assert_close(actual[1], expected[1])


# Note [A saved view of an input the epilogue views] (version_watches.py): a core node saves a view of an input.
INPUT_VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "split_with_sizes": lambda t: t.view(1, 12).split_with_sizes([6, 6], 1)[1],  # s1808_751's
    "chunk": lambda t: t.view(12).chunk(2)[1],
    "unbind": lambda t: t.unbind(0)[1],
    "transpose": lambda t: t.transpose(1, 0),
}


def saving_an_input_view(saver: Callable[..., torch.Tensor], view: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    def program(a: torch.Tensor) -> Any:
        t1 = view(a)
        return t1, saver(t1), a.sum(1)

    return program


def input_written_then_backward(fn: Callable[..., Any], through: tuple[int, ...], under_no_grad: bool) -> Any:
    base = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)
    a = base.mul(1)
    outs = fn(a)
    with torch.set_grad_enabled(not under_no_grad):
        a.mul_(2)
    result = outcome(lambda: torch.stack([outs[k].sum() for k in through]).sum().backward())
    return result[:2], None if base.grad is None else base.grad.clone()


@pytest.mark.parametrize("under_no_grad", [False, True], ids=["grad", "no_grad"])
@pytest.mark.parametrize("entry", ["backend", "compile_function"])
@pytest.mark.parametrize("view", list(INPUT_VIEWS))
@pytest.mark.parametrize("saver", list(INPUT_SAVERS))
def test_a_saved_view_of_a_written_input_raises_where_eager_reaches_the_saver(
    saver: str, view: str, entry: str, under_no_grad: bool
) -> None:
    """The input written after the call: a backward through the saver's output raises as eager's does (the
    prototype's compiled backward, which saved a value computed from a multi-output view, used to run silently
    with the old value's gradient: fuzzer s1808_751); through another output it runs, with eager's gradients."""
    program = saving_an_input_view(INPUT_SAVERS[saver], INPUT_VIEWS[view])
    for through in [(2,), (1, 2)]:
        expected = input_written_then_backward(program, through, under_no_grad)
        assert expected[0] == (("ok", None) if through == (2,) else ("raised", "RuntimeError"))
        actual = input_written_then_backward(compiled(entry, program), through, under_no_grad)
        assert actual[0] == expected[0], through
        if expected[0][0] == "ok":
            torch.testing.assert_close(actual[1], expected[1])


NON_SAVERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "dropout": lambda t: torch.nn.functional.dropout(t, 0.5, True),  # s1809_447: saves its mask, not its input
    "relu_of_a_copy": lambda t: t.clone().relu(),  # saves its result, a fresh tensor
    "add": lambda t: t + 1,
}


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
@pytest.mark.parametrize("alias", ["transpose", "the_base"])
@pytest.mark.parametrize("op", list(NON_SAVERS))
def test_an_op_eager_saves_nothing_of_never_raises(op: str, alias: str, entry: str) -> None:
    """The watches ask eager which values a call saves (not the superset the partitioner may read): a write, then a
    backward through everything, runs as eager's does (fuzzer s1809_447: a watch on ``dropout``'s input raised)."""
    program = saving_an_alias(NON_SAVERS[op], RETURNED_ALIASES[alias])
    expected = alias_written_then_backward(program, (0, 1, 2))
    assert expected[0] == ("ok", None)
    actual = alias_written_then_backward(compiled(entry, program), (0, 1, 2))
    assert actual[0] == expected[0]
    if op != "dropout":  # a compiled dropout draws its own mask
        torch.testing.assert_close(actual[1], expected[1])


@pytest.mark.parametrize("through", [(0, 2), (0, 1, 2)])
def test_a_saved_alias_under_inductor(through: tuple[int, ...]) -> None:
    """Inductor returned the saved buffer itself for an ``_unsafe_view`` written into the core; an ``alias`` output
    goes through AOTAutograd's own ``_unsafe_view`` (Note [A saved alias of a value the caller can write])."""
    program = saving_an_alias(torch.sin, RETURNED_ALIASES["transpose"])
    expected = alias_written_then_backward(program, through)
    torch._dynamo.reset()
    actual = alias_written_then_backward(torch.compile(program, backend=pv.backend("inductor", strict=True)), through)
    assert actual[0] == expected[0]
    if expected[0][0] == "ok":
        torch.testing.assert_close(actual[1], expected[1])
