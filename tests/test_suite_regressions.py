"""Regressions found by running PyTorch's own suites (issue 21): each repro of the issue, compared with eager.

Classes: (1) dynamic shapes with an in-place op (the written-input scan met a SymInt input), (2) compiled
autograd's backward graph (one boxed list input) sent down the replay path, (3) single-tensor ``out=``,
(5) engine code outside the internal-error guard.
"""

from __future__ import annotations

import logging

import pytest
import torch

import predispatch_views
from predispatch_views import pipeline
from tests.parity_utils import assert_matches_eager, view_nodes


def _backend() -> object:
    return predispatch_views.backend("aot_eager")


def relu_then_split(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x * 2
    y.relu_()
    return y.split(2)


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic_dynamic", "dynamic_true"])
def test_dynamic_shapes_with_an_in_place_op(dynamic: bool | None) -> None:
    # Class 1: automatic dynamic recompiles the second shape with a SymInt input.
    compiled = torch.compile(relu_then_split, backend=_backend(), dynamic=dynamic)
    for rows in (4, 6, 7):

        def make_inputs(rows: int = rows) -> list[torch.Tensor]:
            return [torch.randn(rows, 3, generator=torch.Generator().manual_seed(rows), requires_grad=True)]

        assert_matches_eager(relu_then_split, compiled, make_inputs)
    assert not [r for _, r in predispatch_views.FALLBACKS if "internal error" in r]


def test_a_dynamic_graph_keeps_eagers_views() -> None:
    compiled = torch.compile(relu_then_split, backend=_backend(), dynamic=True)
    x = torch.randn(6, 3, requires_grad=True)
    outs = compiled(x)
    assert [o._is_view() for o in outs] == [True] * 3
    assert view_nodes(list(outs)) == view_nodes(list(relu_then_split(x)))


def add_out_then_unbind(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
    torch.add(b, c, out=a)
    return a.unbind(0)


def sin_out(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    torch.sin(a, out=b)
    return b * 2


def max_out(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, ...]:
    torch.max(x, 0, out=(values, indices))
    return values.mul(2).unbind(0)


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


@pytest.mark.parametrize(
    ("fn", "make_inputs"),
    [
        (add_out_then_unbind, lambda: [torch.zeros(3, 4), _randn(3, 4), _randn(4, 3).t()]),
        (sin_out, lambda: [_randn(3, 4), torch.zeros(3, 4)]),
        (max_out, lambda: [_randn(3, 4), torch.zeros(4), torch.zeros(4, dtype=torch.long)]),
    ],
    ids=["add_out", "sin_out", "max_out_tuple"],
)
def test_out_variants(fn, make_inputs) -> None:
    # Class 3: a single-tensor out= made the written-input scan iterate over a Node.
    assert_matches_eager(fn, torch.compile(fn, backend=_backend()), make_inputs)
    inputs, expected = make_inputs(), make_inputs()
    torch.compile(fn, backend=_backend())(*inputs)
    fn(*expected)
    for got, want in zip(inputs, expected):  # the out= buffers are written as eager writes them
        torch.testing.assert_close(got, want)


def mul_unbind(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.mul(2).unbind(0)


@pytest.mark.parametrize("fn", [torch.atleast_1d, mul_unbind], ids=["atleast_1d", "mul_unbind"])
def test_gradcheck_under_compiled_autograd(fn) -> None:
    # Class 2: the backward graph compiled autograd hands the backend has one boxed list input; its epilogue
    # returned the whole list where a tensor belongs and autograd segfaulted (test_atleast_gradient_cpu).
    x = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    seen: list[str] = []
    inner = predispatch_views.backend("aot_eager")

    def recording(gm, example_inputs):
        seen.append(str(torch._guards.CompileContext.current_compile_id()))
        return inner(gm, example_inputs)

    with torch._dynamo.config.patch(compiled_autograd=True):
        assert torch.compile(lambda: torch.autograd.gradcheck(fn, x, check_undefined_grad=False), backend=recording)()
    assert any(s.startswith("!") for s in seen), seen  # the compiled autograd graph did reach the backend


def test_compiled_autograd_gradients_match_eager() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    cot = torch.randn(4)
    (sum(mul_unbind(x)) * cot).sum().backward()
    expected = x.grad
    x.grad = None
    compiled = torch.compile(mul_unbind, backend=_backend())
    with torch._dynamo.config.patch(compiled_autograd=True):
        outs = compiled(x)
        assert type(outs[0].grad_fn).__name__ == "UnbindBackward0"
        torch.compile(lambda: (sum(outs) * cot).sum().backward(), backend=_backend())()
    torch.testing.assert_close(x.grad, expected)


@pytest.mark.xfail(
    strict=True,
    reason="torch 2.13's compiled autograd does not materialize an undefined gradient that a C++ node (the "
    "replayed UnbindBackward0) hands to an autograd.Function's backward (the compiled core); eager code fails the "
    "same way (test_the_torch_bug_behind_the_undefined_gradient_xfail), and stock when the user unbinds its output "
    "(design/04, known limits)",
)
def test_undefined_gradients_through_a_replayed_view_under_compiled_autograd() -> None:
    x = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    with torch._dynamo.config.patch(compiled_autograd=True):
        torch.compile(lambda: torch.autograd.gradcheck(mul_unbind, x), backend=_backend())()


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2  # the eager engine hands zeros for an undefined gradient (materialize_grads)


@pytest.mark.parametrize("compiled_autograd", [False, True], ids=["eager_engine", "compiled_autograd"])
def test_the_torch_bug_behind_the_undefined_gradient_xfail(compiled_autograd: bool) -> None:
    # The xfail above without torch.compile: eager code whose autograd.Function feeds an unbind. Under compiled
    # autograd (torch 2.13) the Function's backward gets None where the eager engine gives zeros. When this test
    # fails, torch fixed it: drop the xfail above.
    x = torch.randn(3, 4, requires_grad=True)
    outs = [torch._C._functions.UndefinedGrad()(o) for o in _Double.apply(x).unbind(0)]
    grads = [torch.zeros_like(o) for o in outs]
    if not compiled_autograd:
        (g,) = torch.autograd.grad(outs, [x], grads, allow_unused=True)
        assert g is not None and not g.any()
        return
    compiled = torch._dynamo.compiled_autograd._enable(torch.compile(backend="eager"))
    with compiled, pytest.raises(TypeError, match="unsupported operand type"):
        torch.autograd.grad(outs, [x], grads, allow_unused=True)


def test_engine_errors_outside_the_pipeline_fall_back(monkeypatch, caplog) -> None:
    # Class 5: the written-input scan ran before the pipeline's own guard; a defect there must fall back.
    def broken(gm):
        raise AttributeError("planted engine defect")

    monkeypatch.setattr(pipeline, "written_inputs", broken)
    x = torch.randn(4, 3, requires_grad=True)
    with caplog.at_level(logging.INFO, logger="predispatch_views"):
        outs = torch.compile(relu_then_split, backend=_backend())(x)
    torch.testing.assert_close(torch.cat(outs), torch.cat(relu_then_split(x)))
    assert any("planted engine defect" in r for _, r in pipeline.FALLBACKS)
    assert "internal error" in caplog.text
    torch._dynamo.reset()
    with pytest.raises(Exception, match="planted engine defect"):  # strict raises it (Dynamo wraps it)
        torch.compile(relu_then_split, backend=predispatch_views.backend("aot_eager", strict=True))(x)


def test_wrapper_setup_errors_fall_back(monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("planted wrapper defect")

    monkeypatch.setattr(pipeline, "uncompiled_when_a_restricted_view_is_written", broken)

    def write_input(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x.add_(1)
        return x.split(2)

    x = torch.randn(4, 3)
    expected_input = x + 1
    outs = torch.compile(write_input, backend=_backend())(x)
    torch.testing.assert_close(x, expected_input)
    torch.testing.assert_close(torch.cat(outs), expected_input)
    assert any("planted wrapper defect" in r for _, r in pipeline.FALLBACKS)


def encoder_then_cross_attention(x: torch.Tensor, w: torch.Tensor, wk: torch.Tensor, p: float, train: bool):
    # Class 4, T5 shrunk: the encoder's final dropout returns its input (p=0, or eval), the decoder's key
    # projection saves it, and the program returns it as encoder_last_hidden_state.
    enc = torch.nn.functional.dropout(x * w, p, train)
    return torch.nn.functional.linear(enc, wk), enc


@pytest.mark.parametrize(("p", "train"), [(0.0, True), (0.5, False)], ids=["p0_train", "eval"])
@pytest.mark.parametrize("entry", ["backend", "compile_function"])
def test_writing_a_returned_input_of_dropout_breaks_the_backward_as_in_eager(p: float, train: bool, entry: str) -> None:
    def run(fn) -> tuple[str, str] | None:
        torch.manual_seed(0)
        x, w, wk = torch.randn(2, 8, 32), torch.randn(32, requires_grad=True), torch.randn(16, 32, requires_grad=True)
        k, enc = fn(x, w, wk, p, train)
        enc.mul_(2)
        try:
            k.sum().backward()
        except RuntimeError as e:
            return type(e).__name__, str(e).split(";")[0].split(": [")[0]
        return None

    if entry == "backend":
        compiled = torch.compile(encoder_then_cross_attention, backend=_backend())
    else:
        compiled = predispatch_views.compile_function(encoder_then_cross_attention, inner="aot_eager")
    expected = run(encoder_then_cross_attention)
    assert expected is not None and "modified by an inplace operation" in expected[1]
    assert run(compiled) == expected


def conj_read_then_written(a0: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # test_view_ops.py::test_conj_view_with_shared_memory: the core reads the conj view, the epilogue replays it.
    a = a0.clone()
    b = a.conj()
    x1 = torch.add(a, b)
    x2 = a.add_(b)
    return x1, x2, b


def dtype_view_read_then_written(a0: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a = a0.clone()
    b = a.view(torch.int32)  # the same geometry as a, other values
    x1 = b + 1
    a.add_(1)
    return x1, a, b


@pytest.mark.parametrize(
    ("fn", "make_inputs"),
    [
        (conj_read_then_written, lambda: [torch.tensor([1.0 + 2.0j, -3.0 + 0.5j])]),
        (dtype_view_read_then_written, lambda: [_randn(2, 3)]),
    ],
    ids=["conj", "view_dtype"],
)
@pytest.mark.parametrize("entry", ["backend", "compile_function"])
def test_a_view_with_its_inputs_geometry_is_not_its_input(fn, make_inputs, entry: str) -> None:
    if entry == "backend":
        compiled = torch.compile(fn, backend=_backend())
    else:
        compiled = predispatch_views.compile_function(fn, inner="aot_eager")
    assert_matches_eager(fn, compiled, make_inputs)


def write_through_view_as_real(a_orig: torch.Tensor) -> torch.Tensor:
    b = torch.view_as_real(a_orig.clone()).transpose(0, 1)
    b += 1
    return b


def write_through_view_as_real_transposed_in_place(a_orig: torch.Tensor) -> torch.Tensor:
    b = torch.view_as_real(a_orig.clone())
    b.transpose_(0, 1)
    b += 1
    return b


@pytest.mark.parametrize("compiled_autograd", [False, True], ids=["plain_autograd", "compiled_autograd"])
@pytest.mark.parametrize("program", [write_through_view_as_real, write_through_view_as_real_transposed_in_place])
def test_a_write_through_a_view_fn_view_under_compiled_autograd(program, compiled_autograd: bool) -> None:
    # test_autograd.py::test_autograd_inplace_views_cross_dtype run dynamo-wrapped: eager's CopySlices replays
    # view_as_real through a view_fn, which compiled autograd rejects; the prototype falls back only then.
    def grad_of(fn) -> torch.Tensor:
        a = torch.ones(3, 3, requires_grad=True, dtype=torch.complex64)
        fn(a).backward(torch.arange(0, 18, dtype=torch.float).view(3, 3, 2))
        return a.grad

    expected = grad_of(program)
    pipeline.FALLBACKS.clear()
    with torch._dynamo.config.patch(compiled_autograd=compiled_autograd):
        # As the dynamo-wrapped suites run it: the forward and the backward in one compiled frame.
        got = torch.compile(lambda: grad_of(program), backend=_backend())()
    torch.testing.assert_close(got, expected)
    reasons = [r for _, r in pipeline.FALLBACKS if "compiled autograd (on) rejects" in r]
    assert bool(reasons) == compiled_autograd, list(pipeline.FALLBACKS)


def out_resizes_a_view(a: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # Fuzzer s61_95 (out= dimension): eager resizes the out= view (with a warning), growing a's storage.
    t1 = a.narrow(0, 0, 1)
    with torch.no_grad():
        torch.exp(x, out=t1)
    return a * 2, t1 * 3


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize("entry", ["backend", "compile_function"])
def test_an_out_call_that_resizes_its_out_tensor(entry: str) -> None:
    def make_inputs() -> list[torch.Tensor]:
        return [_randn(1).requires_grad_(), _randn(3)]

    if entry == "backend":
        compiled = torch.compile(out_resizes_a_view, backend=_backend())
    else:
        compiled = predispatch_views.compile_function(out_resizes_a_view, inner="aot_eager")
    pipeline.FALLBACKS.clear()
    assert_matches_eager(out_resizes_a_view, compiled, make_inputs)
    if entry == "compile_function":
        assert any("aten.exp.out changes a tensor's storage" in r for _, r in pipeline.FALLBACKS)


def out_into_a_base_with_its_view(t0: torch.Tensor, t1: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # Fuzzer s62_92 after its graph break: the second graph receives a view (t1) and its base (c), as the
    # prototype's first graph returns them (a real view, where stock's is a fresh tensor). With dynamic shapes,
    # AOTAutograd's synthetic-base path raises on them (torch 2.13).
    t0.uniform_()
    torch.sub(t1, c, out=c)
    t2 = t0.to(torch.float32)
    _first, _second = t2.unbind(0)
    return t2, t1


def test_aliased_inputs_the_inner_backend_rejects_run_uncompiled() -> None:
    # Note [Graphs the inner backend rejects]: the graph runs as backend="eager" would, logged.
    def make_inputs() -> tuple[torch.Tensor, ...]:
        c = _randn(2, 1)
        return _randn(2, 2), c[0:2], c

    stock = torch.compile(out_into_a_base_with_its_view, backend="aot_eager", dynamic=True)
    with torch.no_grad(), pytest.raises(Exception, match="Cannot call numel"):
        stock(*make_inputs())
    compiled = torch.compile(out_into_a_base_with_its_view, backend=_backend(), dynamic=True)
    pipeline.FALLBACKS.clear()
    expected_inputs, inputs = make_inputs(), make_inputs()
    with torch.no_grad():
        torch.manual_seed(0)
        expected = out_into_a_base_with_its_view(*expected_inputs)
        torch.manual_seed(0)
        outs = compiled(*inputs)
    for got, want in zip(outs + inputs, expected + expected_inputs, strict=True):
        torch.testing.assert_close(got, want)
    assert outs[1]._base is inputs[2] and outs[0]._is_view() == expected[0]._is_view()
    assert any("on inputs that share storage" in r for _, r in pipeline.FALLBACKS)


def test_dynamos_restart_request_is_not_a_fallback() -> None:
    # Note [Dynamo's restarts]: with dynamic shapes, compiling a sparse EmbeddingBag raises
    # TensorifyScalarRestartAnalysis, Dynamo's request to trace the frame again (helper-found, test_aotdispatch's
    # test_embedding_bag_view_dynamic run through the prototype). It was counted as a core that fails to compile.
    bag = torch.nn.EmbeddingBag(100, 8, sparse=True)

    def bag_view(x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return bag(x, offsets).view(-1)

    x, offsets = torch.arange(3), torch.arange(3)
    pipeline.FALLBACKS.clear()
    out = torch.compile(bag_view, backend=predispatch_views.backend("aot_eager", strict=True), dynamic=True)(x, offsets)
    torch.testing.assert_close(out, bag_view(x, offsets))
    assert out._is_view() and out._base is not None
