"""A compiled function called inside another trace (found by PyTorch's test_aotdispatch.py, issue 21).

``aot_function(aot_function(f, compiler), compiler)`` compiles the outer function by tracing through the inner
compiled one; ``test_compilation_context`` checks that the compiler sees the outer trace. Under the prototype the
outer capture ran the inner ``compile_function``'s own compile inside the trace (``fork_rng`` read the generator's
state, so the outer fell back to eager and the compiler never saw it). A ``compile_function`` called under an
enclosing trace now runs its function's code, so that the enclosing trace records the whole program, as Dynamo
inlines an inner ``torch.compile``.
"""

from __future__ import annotations

import torch

import predispatch_views as pv
from tests.parity_utils import assert_same, flat_tensors, view_nodes


def _inner(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.mul(2).sin().unbind(0)


def _outer_of(inner: object):
    def outer(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return inner(x.cos())  # type: ignore[operator]

    return outer


def _graphs(calls: list[int]):
    def compiler(gm: torch.fx.GraphModule, example_inputs: object) -> object:
        calls.append(len(gm.graph.nodes))
        return gm

    return compiler


def _run(fn, x: torch.Tensor):
    outs = fn(x)
    grads = [torch.full_like(o, float(i + 1)) for i, o in enumerate(outs)]
    torch.autograd.backward(list(outs), grads)
    return outs, x.grad


def test_compile_function_of_a_compile_function_compiles_the_whole_program() -> None:
    calls: list[int] = []
    inner = pv.compile_function(_inner, inner=_graphs(calls))
    outer = pv.compile_function(_outer_of(inner), inner=_graphs(calls))
    pv.FALLBACKS.clear()
    x = torch.randn(3, 4, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    outs, grad = _run(outer, x)
    outs_ref, grad_ref = _run(_outer_of(_inner), x_ref)
    assert not pv.FALLBACKS
    assert calls, "the outer program was never compiled"
    assert view_nodes(flat_tensors(outs)) == view_nodes(flat_tensors(outs_ref))
    assert all(o._is_view() for o in outs)
    for a, e in zip(outs, outs_ref, strict=True):
        assert_same(a, e)
    assert_same(grad, grad_ref)


def test_inner_compiled_call_without_grad_is_compiled_by_the_outer() -> None:
    # test_compilation_context's shape: the first compile with grad, then the nested one called without grad.
    calls: list[int] = []
    inner = pv.compile_function(lambda x: x.sin().sin(), inner=_graphs(calls))
    inner(torch.randn(5, requires_grad=True))
    first = len(calls)
    outer = pv.compile_function(inner, inner=_graphs(calls))
    pv.FALLBACKS.clear()
    x = torch.randn(5)
    assert_same(outer(x), x.sin().sin())
    assert not pv.FALLBACKS
    assert len(calls) == first + 1


def test_make_fx_traces_through_a_compiled_function() -> None:
    inner = pv.compile_function(_inner, inner="aot_eager")
    gm = torch.fx.experimental.proxy_tensor.make_fx(inner)(torch.randn(3, 4))
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert {"aten.mul.Tensor", "aten.sin.default", "aten.unbind.int"} <= targets
    assert inner.cache == {}  # nothing was compiled by the inner entry point inside the trace


def test_torch_compile_of_a_compiled_function_matches_eager() -> None:
    inner = pv.compile_function(_inner, inner="aot_eager")
    outer = torch.compile(_outer_of(inner), backend=pv.backend("aot_eager"), fullgraph=True)
    x = torch.randn(3, 4, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    outs, grad = _run(outer, x)
    outs_ref, grad_ref = _run(_outer_of(_inner), x_ref)
    assert view_nodes(flat_tensors(outs)) == view_nodes(flat_tensors(outs_ref))
    for a, e in zip(outs, outs_ref, strict=True):
        assert_same(a, e)
    assert_same(grad, grad_ref)
