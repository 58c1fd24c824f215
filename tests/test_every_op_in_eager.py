"""Graphs that run uncompiled: Note [A graph whose every computing op runs in eager] (inner_backend.py), and the
version watch that must not wrap such a graph (Note [Eager's version error]).

A program cut around a run of nodes that must run in eager can leave nothing but views to compile. It used to fall
back to stock, whose program crashed or diverged where eager runs (fuzzer s1829_854: a second backward; s1828_1634:
other gradients). It now runs uncompiled, as Dynamo with ``backend="eager"`` runs it, with a logged reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import predispatch_views as pv
from predispatch_views.compare.fuzz_program import ReturnsInput
from tests.parity_utils import assert_matches_eager, outcome


def returned_input_written_under_no_grad(a: torch.Tensor, b: torch.Tensor) -> Any:
    t0 = ReturnsInput.apply(a)  # eager: a view of a, with the Function's backward: it runs in eager
    with torch.no_grad():
        t0.copy_(a)  # a write through that view: in eager too
        t1 = b.narrow(0, 0, 2)
    return (t1, *t1.tensor_split(2, 0))


def leaves() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(5, generator=gen, requires_grad=True), torch.randn(2, 1, generator=gen, requires_grad=True)]


def sliced_inputs(made: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    a, b = made or leaves()
    return [a.mul(1)[:-1], b.mul(1)]  # a view of a non-leaf, as the fuzzer's sliced inputs


def twice(fn: Callable[..., Any]) -> Callable[[], Any]:
    """Forward, then two backwards through the first output: eager's graph runs the second too (no saved value)."""

    def run() -> Any:
        made = leaves()
        out = fn(*sliced_inputs(made))
        grads = []
        for _ in range(2):
            out[0].sum().backward()
            grads.append([None if t.grad is None else t.grad.clone() for t in made])
        return [o.detach().clone() for o in out], grads

    return run


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_graph_whose_every_computing_op_runs_in_eager_runs_uncompiled(dynamic: bool) -> None:
    fn = returned_input_written_under_no_grad
    expected = outcome(twice(fn))
    assert expected[0] == "ok"
    torch._dynamo.reset()
    assert outcome(twice(torch.compile(fn, backend="aot_eager", dynamic=dynamic)))[0] == "raised"  # stock's premise
    torch._dynamo.reset()
    pv.FALLBACKS.clear()
    compiled = torch.compile(fn, backend=pv.backend("aot_eager"), dynamic=dynamic)
    actual = outcome(twice(compiled))
    assert actual[0] == "ok"
    torch.testing.assert_close(actual[1], expected[1])
    assert any("every op that computes runs in eager" in reason for _, reason in pv.FALLBACKS)
    torch._dynamo.reset()
    assert_matches_eager(fn, torch.compile(fn, backend=pv.backend("aot_eager"), dynamic=dynamic), sliced_inputs)
    with pytest.raises(Exception, match="nothing but views would be compiled"):
        torch._dynamo.reset()
        torch.compile(fn, backend=pv.backend("aot_eager", strict=True), dynamic=dynamic)(*sliced_inputs())


def result_written_then_returned(a: torch.Tensor) -> Any:
    t0 = a.tanh()  # eager's node saves t0; the write below makes stock's compile raise: the graph runs uncompiled
    t0.mul_(-1.0)
    return (t0, t0)


def test_no_version_watch_on_a_graph_run_uncompiled() -> None:
    """The caller writes the output again: eager's own TanhBackward0 saved it at version 0, and raises naming that
    version; a watch set when the graph returned (version 1) raised first, naming version 1 (fuzzer s1829_604)."""

    def written_backward(fn: Callable[..., Any]) -> Any:
        a = torch.randn(2, 2, generator=torch.Generator().manual_seed(0), requires_grad=True).mul(1)
        out = fn(a)
        out[0].mul_(2)
        return outcome(lambda: out[1].sum().backward())

    expected = written_backward(result_written_then_returned)
    assert expected[0] == "raised" and "expected version 0" in expected[2]
    torch._dynamo.reset()
    pv.FALLBACKS.clear()
    actual = written_backward(torch.compile(result_written_then_returned, backend=pv.backend("aot_eager")))
    assert any("the graph runs uncompiled" in reason for _, reason in pv.FALLBACKS)
    assert actual == expected
