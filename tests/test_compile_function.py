"""compile_function, the no-Dynamo entry point, against eager (issue 10).

Modules and closures (parameters, buffers and closed-over tensors become inputs), custom autograd.Functions (one
node of the core each), what a pre-dispatch trace cannot record (requires_grad_, autograd.grad inside: eager with
a logged reason),
non-tensor outputs, output identity, unused inputs, a program whose eager backward fails, and a training loop.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import predispatch_views as pv
from predispatch_views.compare.fuzz_program import ReturnsInput
from tests.parity_utils import alias_structure, assert_matches_eager, assert_same, flat_tensors, outcome, view_nodes


def _compile(fn: Callable[..., Any], strict: bool = False) -> Callable[..., Any]:
    return pv.compile_function(fn, inner="aot_eager", strict=strict)


def _x(*shape: int, requires_grad: bool = True, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).requires_grad_(requires_grad)


def _backward(outs: Any, seed: int = 0) -> None:
    outs = [o for o in flat_tensors(outs) if o.requires_grad]
    gen = torch.Generator().manual_seed(seed)
    torch.autograd.backward(outs, [torch.randn(o.shape, generator=gen) for o in outs])


def _assert_outputs_match(actual: Any, expected: Any, inputs: list[torch.Tensor]) -> None:
    outs_a, outs_e = flat_tensors(actual), flat_tensors(expected)
    assert type(actual) is type(expected)
    assert alias_structure(inputs, outs_a) == alias_structure(inputs, outs_e)
    assert view_nodes(outs_a) == view_nodes(outs_e)
    for a, e in zip(outs_a, outs_e, strict=True):
        torch.testing.assert_close(a, e)


def _assert_same_state(actual: nn.Module, expected: nn.Module) -> None:
    grads = {n: p.grad for n, p in expected.named_parameters()}
    for n, p in actual.named_parameters():
        torch.testing.assert_close(p, dict(expected.named_parameters())[n], msg=n)
        if grads[n] is None:
            assert p.grad is None, n
        else:
            torch.testing.assert_close(p.grad, grads[n], msg=n)
    for (n, b_a), b_e in zip(actual.named_buffers(), expected.buffers(), strict=True):
        torch.testing.assert_close(b_a, b_e, msg=n)


def _new_fallbacks(before: int) -> list[str]:
    return [reason for _, reason in list(pv.FALLBACKS)[before:]]


# ---------------------------------------------------------------------------------------------------------
# Modules and closures.
# ---------------------------------------------------------------------------------------------------------


class ChunkHeads(nn.Module):
    """A linear layer, a BatchNorm (buffers mutated in training), and chunk/split heads."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 12)
        self.norm = nn.BatchNorm1d(12)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 12))

    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        h = self.norm(self.proj(x)) * self.scale
        q, k, v = h.chunk(3, -1)
        return q, k, v.split([1, 3], -1)


def _pair(factory: Callable[[], nn.Module]) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    module = factory()
    return module, copy.deepcopy(module)


def test_closure_over_a_module_matches_eager_and_grads_land_on_its_parameters() -> None:
    """The repro of issue 10: a FakeTensor assertion before."""
    lin_e, lin_c = _pair(lambda: nn.Linear(4, 12))
    compiled = _compile(lambda x: lin_c(x).chunk(3, -1), strict=True)
    for step in range(2):
        x_e, x_c = _x(2, 4, seed=step), _x(2, 4, seed=step)
        outs_e, outs_c = lin_e(x_e).chunk(3, -1), compiled(x_c)
        _assert_outputs_match(outs_c, outs_e, [x_c])
        _backward(outs_e, step)
        _backward(outs_c, step)
        torch.testing.assert_close(x_c.grad, x_e.grad)
    _assert_same_state(lin_c, lin_e)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_module_lifts_parameters_and_buffers(mode: str) -> None:
    """compile_function(module): outputs, parameter grads and BatchNorm's running stats over three calls."""
    eager, twin = _pair(ChunkHeads)
    eager.train(mode == "train")
    twin.train(mode == "train")
    compiled = _compile(twin, strict=True)
    for step in range(3):
        x = _x(5, 4, seed=step)
        outs_e, outs_c = eager(x), compiled(x)
        _assert_outputs_match(outs_c, outs_e, [x])
        _backward(outs_e, step)
        _backward(outs_c, step)
    _assert_same_state(twin, eager)
    assert len(compiled.cache) == 1


def test_module_training_flag_and_replaced_parameter_are_seen() -> None:
    eager, twin = _pair(ChunkHeads)
    compiled = _compile(twin, strict=True)
    x = _x(5, 4)
    _assert_outputs_match(compiled(x), eager(x), [x])
    eager.eval()
    twin.eval()
    _assert_outputs_match(compiled(x), eager(x), [x])
    weight = torch.randn(12, 4)
    eager.proj.weight = nn.Parameter(weight.clone())
    twin.proj.weight = nn.Parameter(weight.clone())
    _assert_outputs_match(compiled(x), eager(x), [x])


def test_closed_over_tensor_becomes_an_input() -> None:
    """A closed-over tensor is read on every call (not a stale constant) and gets its gradient."""
    w_e, w_c = _x(3, 4, seed=1), _x(3, 4, seed=1)

    def make(w: torch.Tensor) -> Callable[[torch.Tensor], Any]:
        return lambda x: (x * w).unbind(0)

    fn_e, compiled = make(w_e), _compile(make(w_c), strict=True)
    for step in range(2):
        x = _x(3, 4, seed=10 + step)
        outs_e, outs_c = fn_e(x), compiled(x)
        _assert_outputs_match(outs_c, outs_e, [x])
        _backward(outs_e, step)
        _backward(outs_c, step)
        torch.testing.assert_close(w_c.grad, w_e.grad)
        with torch.no_grad():  # an in-place update between calls must be seen by the next one
            w_e.add_(1)
            w_c.add_(1)


class RebindsABuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> Any:
        self.calls = self.calls + 1
        return (x * self.calls).unbind(0)


def test_module_rebinding_its_buffer_runs_eagerly_and_keeps_its_state() -> None:
    eager, twin = _pair(RebindsABuffer)
    before = len(pv.FALLBACKS)
    compiled = _compile(twin)
    for step in range(2):
        x = _x(2, 3, seed=step)
        _assert_outputs_match(compiled(x), eager(x), [x])
    assert isinstance(twin.calls, torch.Tensor) and not isinstance(twin.calls, pv.capture.ti.FakeTensor)
    _assert_same_state(twin, eager)
    assert any("rebinds buffer calls" in r for r in _new_fallbacks(before))
    with pytest.raises(pv.StrictModeError, match="rebinds buffer calls"):
        _compile(RebindsABuffer(), strict=True)(_x(2, 3))


# ---------------------------------------------------------------------------------------------------------
# What a pre-dispatch trace cannot record: eager, with the reason logged.
# ---------------------------------------------------------------------------------------------------------


class PlusOneBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad + 1


class DoublesGradInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 1

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.mul_(2)


def _through(function: type[torch.autograd.Function]) -> Callable[[torch.Tensor], Any]:
    return lambda x: function.apply(x.mul(3)).unbind(0)


def _requires_grad_inside(a: torch.Tensor) -> Any:
    a.requires_grad_(True)
    return a.mul(2).unbind(0)


def _requires_grad_of_an_intermediate(a: torch.Tensor) -> Any:
    y = a.detach().mul(2)
    y.requires_grad = True
    return y, y.sin().unbind(0)


def _grad_inside(create_graph: bool) -> Callable[[torch.Tensor], Any]:
    def fn(x: torch.Tensor) -> Any:
        y = x.sin()
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=create_graph)
        return g.unbind(0), y.unbind(0)

    return fn


def _hook_inside(x: torch.Tensor) -> Any:
    y = x.mul(2)
    y.register_hook(lambda g: g * 10)
    return y.unbind(0)


def _inference_mode_region(x: torch.Tensor) -> Any:
    y = x.mul(2)
    with torch.inference_mode():
        z = x.sin()
    return y.unbind(0), z


def _requires_grad_off_inside(a: torch.Tensor) -> Any:
    a.requires_grad_(False)  # a leaf input: eager allows it
    return a.mul(2).unbind(0)


def _requires_grad_then_read_with_another_input(x: torch.Tensor, w: torch.Tensor) -> Any:
    y = x * 2
    y.requires_grad_()
    return y.sin() * w, y


REQUIRES_GRAD_INSIDE: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = {
    "requires_grad_": (_requires_grad_inside, lambda: [_x(2, 3, requires_grad=False)]),
    "requires_grad_setter": (_requires_grad_of_an_intermediate, lambda: [_x(2, 3, requires_grad=False)]),
    "of_an_intermediate_read_with_grad": (
        _requires_grad_then_read_with_another_input,
        lambda: [_x(3, requires_grad=False), _x(3)],
    ),
}


@pytest.mark.parametrize("name", sorted(REQUIRES_GRAD_INSIDE))
def test_requires_grad_inside_the_function_runs_in_eager_between_segments(name: str) -> None:
    """Note [requires_grad_ inside a function]: the call is recorded and runs in eager between two compiled
    segments, so the input (or intermediate) requires grad from there on, as a leaf, as eager's does; it ran the
    whole function eagerly before (as do the upstream cases input_inplace_requires_grad_true and
    some_output_requires_grad_input_doesnt)."""
    fn, make_inputs = REQUIRES_GRAD_INSIDE[name]
    before = len(pv.FALLBACKS)
    compiled = _compile(fn, strict=True)
    assert_matches_eager(fn, compiled, make_inputs)
    inputs_e, inputs_c = make_inputs(), make_inputs()
    fn(*inputs_e)
    compiled(*inputs_c)
    assert [(t.requires_grad, t.is_leaf) for t in inputs_c] == [(t.requires_grad, t.is_leaf) for t in inputs_e]
    assert _new_fallbacks(before) == []


UNRECORDABLE: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]], str]] = {
    "requires_grad_false": (_requires_grad_off_inside, lambda: [_x(2, 3)], "requires_grad_(False)"),
    "autograd_grad": (_grad_inside(False), lambda: [_x(2, 3)], "backward pass inside"),
    "autograd_grad_create_graph": (_grad_inside(True), lambda: [_x(2, 3)], "backward pass inside"),
    "register_hook": (_hook_inside, lambda: [_x(2, 3)], "register_hook"),
    "inference_mode": (_inference_mode_region, lambda: [_x(2, 3)], "inference_mode region"),
}


@pytest.mark.parametrize("name", sorted(UNRECORDABLE))
def test_unrecordable_calls_run_eagerly_with_a_reason(name: str) -> None:
    fn, make_inputs, reason = UNRECORDABLE[name]
    before = len(pv.FALLBACKS)
    compiled = _compile(fn)
    assert_matches_eager(fn, compiled, make_inputs)
    # The input's own requires_grad flag after the call, as eager leaves it.
    inputs_e, inputs_c = make_inputs(), make_inputs()
    fn(*inputs_e)
    compiled(*inputs_c)
    assert [t.requires_grad for t in inputs_c] == [t.requires_grad for t in inputs_e]
    reasons = _new_fallbacks(before)
    assert len(reasons) == 1 and reason in reasons[0], reasons
    with pytest.raises(pv.StrictModeError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        _compile(fn, strict=True)(*make_inputs())


@pytest.mark.parametrize("function", [PlusOneBackward, DoublesGradInPlace], ids=lambda f: f.__name__)
def test_autograd_functions_are_compiled_with_their_backward(function: type[torch.autograd.Function]) -> None:
    # Note [Custom autograd.Functions in the core]: one node of the core, whose backward is the user's.
    fn = _through(function)
    before = len(pv.FALLBACKS)
    assert_matches_eager(fn, _compile(fn, strict=True), lambda: [_x(2, 3)])
    assert _new_fallbacks(before) == []


def test_autograd_function_gradient_is_eagers() -> None:
    """The issue's numbers: backward g + 1 gives 2 per element in eager (1 when the backward was dropped)."""
    x = _x(2, 3)
    sum(o.sum() for o in _compile(lambda x: PlusOneBackward.apply(x).unbind(0))(x)).backward()
    assert torch.equal(x.grad, torch.full((2, 3), 2.0))


def test_autograd_function_elsewhere_is_not_refused_after_a_capture() -> None:
    _compile(_through(PlusOneBackward))(_x(2, 3))
    x = _x(2, 3)
    PlusOneBackward.apply(x).sum().backward()  # Function.apply is restored once the capture is over
    assert torch.equal(x.grad, torch.full((2, 3), 2.0))


# ---------------------------------------------------------------------------------------------------------
# Outputs: constants, torch.Size, identity.
# ---------------------------------------------------------------------------------------------------------


def _with_constants(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return {"views": y.unbind(0), "shape": y.shape, "n": y.dim(), "name": "heads", "none": None}


def test_non_tensor_and_size_outputs() -> None:
    x = _x(2, 3)
    expected, actual = _with_constants(x), _compile(_with_constants, strict=True)(x)
    assert type(actual["shape"]) is torch.Size and actual["shape"] == expected["shape"]
    assert {k: v for k, v in actual.items() if k != "views"} == {k: v for k, v in expected.items() if k != "views"}
    _assert_outputs_match(actual["views"], expected["views"], [x])


def _duplicated(x: torch.Tensor) -> Any:
    v = x.mul(2).unbind(0)[0]
    return v, v


def _duplicated_on_a_fallback(x: torch.Tensor) -> Any:
    y = x.mul(2)
    y.detach().resize_(6)  # a storage change: stock AOTAutograd on the captured graph
    v = y.unbind(0)[0]
    return v, v


def _returns_inputs(x: torch.Tensor, w: torch.Tensor) -> Any:
    w.add_(1)
    return x, w, x.mul(2).unbind(0)


@pytest.mark.parametrize("fn", [_duplicated, _duplicated_on_a_fallback], ids=["replayed", "fallback"])
def test_a_tensor_returned_twice_is_one_object(fn: Callable[..., Any]) -> None:
    """On the fallback, stock AOTAutograd returns two distinct tensors when the input requires grad."""
    x = _x(2, 3)
    out = _compile(fn)(x)
    assert out[0] is out[1]
    torch.testing.assert_close(out[0], fn(x)[0])


def test_returned_inputs_are_the_inputs() -> None:
    x, w = _x(2, 3), _x(2, 3, requires_grad=False)
    out = _compile(_returns_inputs, strict=True)(x, w)
    assert out[0] is x and out[1] is w
    torch.testing.assert_close(w, _x(2, 3, requires_grad=False) + 1)


# ---------------------------------------------------------------------------------------------------------
# Unused inputs; a program whose eager backward fails.
# ---------------------------------------------------------------------------------------------------------


def _ignores_y(x: torch.Tensor, y: torch.Tensor) -> Any:
    return x.mul(2).unbind(0)


def _ignores_y_on_a_fallback(x: torch.Tensor, y: torch.Tensor) -> Any:
    z = x.mul(2)
    row = z[1]
    z.detach().resize_(6)  # a storage change under a view kept across it: the program falls back
    return row, *z.unbind(0)


def _values_and_grads(fn: Callable[..., Any], inputs: list[torch.Tensor], leaves: list[torch.Tensor]) -> list[Any]:
    outs = flat_tensors(fn(*inputs))
    values = [o.detach().clone() for o in outs]
    _backward(outs)
    return [values, [leaf.grad for leaf in leaves]]


@pytest.mark.parametrize("fn", [_ignores_y, _ignores_y_on_a_fallback], ids=["replayed", "fallback"])
def test_unused_leaf_gets_no_grad(fn: Callable[..., Any]) -> None:
    """On the fallback too: stock AOTAutograd would give y a zero gradient."""
    before = len(pv.FALLBACKS)
    results = []
    for f in (fn, _compile(fn)):
        x, y = _x(2, 3), _x(4)
        results.append(_values_and_grads(f, [x, y], [x, y]))
    assert results[1][1][1] is None
    assert_same(results[1], results[0])
    assert ("resize_" in " ".join(_new_fallbacks(before))) == (fn is _ignores_y_on_a_fallback)


@pytest.mark.parametrize("fn", [_ignores_y, _ignores_y_on_a_fallback], ids=["replayed", "fallback"])
def test_unused_aliased_input(fn: Callable[..., Any]) -> None:
    """Two views of one base, the second unused (stock: "outs_to_grad length (2) != tangents length (1)")."""
    results = []
    for f in (fn, _compile(fn)):
        leaf = _x(4, 3)
        base = leaf.mul(1)
        results.append(_values_and_grads(f, [base[:2], base[2:].view(-1)[:4]], [leaf]))
    assert_same(results[1], results[0])


def _backward_would_fail(x: torch.Tensor) -> Any:
    t = x.sin()
    with torch.no_grad():
        x.squeeze_()
    return t.unbind(0)


def test_program_whose_eager_backward_fails_raises_only_in_backward() -> None:
    def inputs() -> torch.Tensor:
        return _x(2, 1, 3).mul(1)

    before = len(pv.FALLBACKS)
    x_e, x_c = inputs(), inputs()
    outs_e, outs_c = _backward_would_fail(x_e), _compile(_backward_would_fail)(x_c)
    assert x_c.shape == x_e.shape
    _assert_outputs_match(outs_c, outs_e, [x_c])
    error_e = outcome(lambda: _backward(outs_e))
    assert error_e[0] == "raised"
    assert outcome(lambda: _backward(outs_c)) == error_e
    reasons = (
        "compiling the captured graph failed",
        "a metadata mutation of an input",
        "an input's own metadata mutation",
        "compiling the core raised",
    )
    assert any(reason in r for r in _new_fallbacks(before) for reason in reasons)


def _transposes_a_size_one_input(a: torch.Tensor, b: torch.Tensor) -> Any:  # fuzzer s41_188
    b.transpose_(0, 2)  # (1, 1, 1): no visible change, but eager bumps the version a shares
    return (a,)


def _saves_then_transposes_twice(a: torch.Tensor, b: torch.Tensor) -> Any:
    y = a.sin()  # saves a
    b.t_()
    b.t_()
    return y, a


def _squeezes_then_reads_its_alias(a: torch.Tensor, b: torch.Tensor) -> Any:  # fuzzer s53_604
    b.squeeze_(0)
    return (a.add(1.0).sin(),)


def _writes_then_transposes(a: torch.Tensor, b: torch.Tensor) -> Any:  # fuzzer s52_634
    b.mul_(2.0)
    b.transpose_(0, 2)
    return (F.dropout(a.sin().sigmoid(), 0.5, True),)


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (_transposes_a_size_one_input, (2, 1, 1, 1)),
        (_saves_then_transposes_twice, (2, 3, 3)),
        (_squeezes_then_reads_its_alias, (2, 1)),
        (_writes_then_transposes, (2, 2, 1, 3)),
    ],
)
def test_metadata_mutation_of_an_input_itself_runs_in_eager_between_compiled_segments(
    fn: Callable[..., Any], shape: tuple[int, ...]
) -> None:
    """AOTAutograd applies an input's final metadata after the region in one step (nothing, where it ends as it
    was); eager's version bumps regenerate the aliases' grad_fns and make tensors saved from them stale. Dynamo
    breaks the graph at such a call; compile_function cuts around it and runs it in eager (Note [Segments]), or
    runs the whole function eagerly where the cut is refused (a compiled segment before it may save the input)."""

    def inputs() -> list[torch.Tensor]:
        source = _x(*shape).mul(1)
        return [source[0], source[1]]

    before = len(pv.FALLBACKS)
    torch.manual_seed(0)
    ins_e = inputs()
    outs_e = fn(*ins_e)
    torch.manual_seed(0)
    ins_c = inputs()
    outs_c = _compile(fn)(*ins_c)
    assert [(t.shape, t.stride(), t._version) for t in ins_c] == [(t.shape, t.stride(), t._version) for t in ins_e]
    assert outcome(lambda: _backward(outs_c)) == outcome(lambda: _backward(outs_e))
    fallbacks = [r for r in _new_fallbacks(before) if "metadata mutation" in r]
    # A compiled op's result shows the compiled function's node (as under stock); everything else is eager's.
    compiled = {"CompiledFunctionBackward"} if not fallbacks else set()
    for o_c, o_e in zip(outs_c, outs_e):
        assert type(o_c.grad_fn).__name__ in {type(o_e.grad_fn).__name__} | compiled
    # a.sin() saves a: the uncompiled segment would start there, and nothing but the eager calls is left to compile
    # (a segment that runs in eager whole computes nothing: segments._computes), so the function runs eagerly.
    assert bool(fallbacks) == (fn is _saves_then_transposes_twice), fallbacks


# ---------------------------------------------------------------------------------------------------------
# Training.
# ---------------------------------------------------------------------------------------------------------


def test_sgd_training_through_compile_function_matches_eager() -> None:
    """20 SGD steps of a module with chunk/split heads: eager's losses and parameters, one trace."""
    eager, twin = _pair(ChunkHeads)
    compiled = _compile(twin, strict=True)
    runs = []
    for module, forward in ((eager, eager), (twin, compiled)):
        opt = torch.optim.SGD(module.parameters(), lr=0.05)
        losses = []
        for step in range(20):
            x = _x(6, 4, requires_grad=False, seed=step)
            q, k, (v0, v1) = forward(x)
            loss = (q * k).sum() + v0.pow(2).mean() - v1.sum() * 0.1
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        runs.append(losses)
    torch.testing.assert_close(runs[1], runs[0], rtol=1e-4, atol=1e-5)
    _assert_same_state(twin, eager)
    assert not torch.equal(twin.proj.weight, _pair(ChunkHeads)[0].proj.weight)  # the loop did train
    assert len(compiled.cache) == 1


def test_returned_closed_over_tensors_are_themselves_and_in_place_updates_happen_once() -> None:
    table = nn.Parameter(torch.randn(3, 4))
    calls = torch.zeros(())

    def fn(x: torch.Tensor) -> Any:
        calls.add_(1)  # a small real tensor: the trace must not update it itself
        return table, (x * table).unbind(0)

    compiled = _compile(fn, strict=True)
    x = _x(3, 4)
    out = compiled(x)
    compiled(x)
    assert out[0] is table and calls.item() == 2
    _assert_outputs_match(out[1], (x * table).unbind(0), [x])


@pytest.mark.slow
def test_never_worse_than_the_backend_on_the_case_library() -> None:
    """scripts/compile_function_parity.py as a test: per case, as many probes match eager as under the backend."""
    from predispatch_views.compare.cases import CASES
    from predispatch_views.compare.parity import compare, run_case
    from predispatch_views.compare.strategies import eager, prototype, prototype_fn

    function = prototype_fn("aot_eager")
    worse = []
    for case in CASES:
        reference = run_case(case, eager())
        backend, compiled = run_case(case, prototype("aot_eager")), run_case(case, function)
        compare(reference, backend)
        compare(reference, compiled)
        if compiled.matched < backend.matched:
            worse.append(case.name)
    assert not worse


def test_explain_a_closure_over_a_module() -> None:
    """explain() captures like compile_function: the module's parameters are inputs, not a FakeTensor error."""
    lin = nn.Linear(4, 6)
    explanation = pv.explain(lambda x: lin(x).chunk(3, -1), _x(2, 4))
    assert explanation.compile_error is None
    eager, prototype = explanation.autograd["eager"], explanation.autograd["prototype[aot_eager]"]
    assert prototype.node_counts["SplitBackward0"] == eager.node_counts["SplitBackward0"] == 1
    assert (prototype.n_views, prototype.n_bases) == (eager.n_views, eager.n_bases) == (3, 1)


def sort_into_fresh_out_tensors(x: torch.Tensor) -> Any:
    values, indices = torch.empty(0), torch.empty(0, dtype=torch.long)
    torch.sort(x * 2, 0, out=(values, indices))  # resizes both: tensors the program made, nothing aliases them
    return *values.unbind(0), indices


def sin_into_a_fresh_out_tensor(x: torch.Tensor) -> Any:
    out = torch.empty(0)
    torch.sin(x, out=out)
    return out.unbind(0)


def sin_into_a_viewed_out_tensor(x: torch.Tensor) -> Any:
    out = torch.empty(0)
    head = out.view(-1)  # an alias of the old storage: the resize is a storage change it would miss
    torch.sin(x, out=out)
    return head, out.unbind(0)


def sort_into_its_input_and_a_fresh_index(x: torch.Tensor) -> Any:  # fuzzer s1802_107
    y = x * 2
    indices = torch.empty(0, dtype=torch.long)
    torch.sort(y, 0, out=(y, indices))  # y keeps its shape (written in place); only the fresh indices resize
    return *y.unbind(0), indices


def sort_into_a_viewed_input_and_a_fresh_index(x: torch.Tensor) -> Any:
    y = x * 2
    head = y[0]  # taken before the write: an alias that sees it, as in eager
    indices = torch.empty(0, dtype=torch.long)
    torch.sort(y, 0, out=(y, indices))
    return head, *y.unbind(1), indices


@pytest.mark.parametrize(
    "fn",
    [
        sort_into_fresh_out_tensors,
        sin_into_a_fresh_out_tensor,
        sort_into_its_input_and_a_fresh_index,
    ],
    ids=lambda f: f.__name__,
)
def test_an_out_call_that_resizes_a_fresh_tensor_is_compiled(fn: Callable[..., Any]) -> None:
    # It fell back before (a storage change); the fresh out tensor's new storage is nobody else's. An out tensor
    # the call does not resize is written in place, as by any in-place call, whatever aliases it.
    assert_matches_eager(fn, _compile(fn, strict=True), lambda: [_x(3, 4, requires_grad=False)])


def test_an_out_call_writing_a_viewed_tensor_it_does_not_resize_is_no_storage_change() -> None:
    """The view ``head`` sees ``sort``'s write, which another rule replays in eager (or refuses): never the
    storage-change fallback, and eager's values either way."""
    fn = sort_into_a_viewed_input_and_a_fresh_index
    before = len(pv.FALLBACKS)
    assert_matches_eager(fn, _compile(fn), lambda: [_x(3, 4, requires_grad=False)])
    assert not any("changes a tensor's storage" in r for _, r in list(pv.FALLBACKS)[before:])


def test_an_out_call_that_resizes_a_viewed_tensor_still_falls_back() -> None:
    with pytest.raises(pv.StrictModeError, match="changes a tensor's storage"):
        _compile(sin_into_a_viewed_out_tensor, strict=True)(_x(3, 4, requires_grad=False))


def add_its_own_transpose(x: torch.Tensor) -> Any:
    y = x * 1
    y.add_(y.t())  # both dense: eager raises "unsupported operation"
    return y.unbind(0)


def sin_of_its_transpose_into_a_diagonal(x: torch.Tensor) -> Any:
    d = (x * 1).diagonal()
    torch.sin(d.t(), out=d)  # not dense: eager computes in its iteration order, reading what it wrote
    return d.unbind(0)


@pytest.mark.parametrize(
    ("fn", "shape"),
    [(add_its_own_transpose, (3, 3)), (sin_of_its_transpose_into_a_diagonal, (3, 3, 3))],
    ids=["add_", "out"],
)
def test_a_write_over_its_own_input_in_another_layout_runs_in_eager(fn: Callable[..., Any], shape: tuple) -> None:
    """The functional graph reads every input element before writing: it gave values (or no error) eager does not
    (fuzzer s1402_547, where Dynamo breaks the graph at the non-contiguous ``out=`` and stock matches eager). The call
    runs in eager between two compiled segments, under no_grad too: its views are restricted there, and the segment
    before hands them over as its epilogue replays them, eager's own (until 2215a3b the cut was refused there,
    ``graph_meta.through_a_copy`` taking every declared view for an op that returns its input)."""
    if fn is add_its_own_transpose:  # the trace raises eager's error itself
        expected = outcome(lambda: fn(_x(*shape)))
        assert expected[0] == "raised" and outcome(lambda: _compile(fn, strict=True)(_x(*shape))) == expected
        return
    assert_matches_eager(fn, _compile(fn, strict=True), lambda: [_x(*shape, requires_grad=False)])
    with torch.no_grad():
        assert_matches_eager(fn, _compile(fn, strict=True), lambda: [_x(*shape, requires_grad=False)])


def test_a_metadata_write_of_a_dropout_that_returns_its_input_runs_in_eager() -> None:
    def unsqueeze_a_p0_dropout(b: torch.Tensor) -> Any:  # fuzzer s1501_1617
        t0 = F.dropout(b, 0.0, True)  # b itself in eager; a fresh tensor in the trace
        t1 = F.dropout(t0, 0.0, True)
        t0.unsqueeze_(2)
        return ((b * t1).select(1, 1),)

    assert_matches_eager(unsqueeze_a_p0_dropout, _compile(unsqueeze_a_p0_dropout), lambda: [_x(3, 3).mul(1)])
    with pytest.raises(pv.StrictModeError, match="a fresh tensor in the trace"):
        _compile(unsqueeze_a_p0_dropout, strict=True)(_x(3, 3).mul(1))


def test_a_write_beside_its_input_stays_compiled() -> None:
    def add_the_next_row(x: torch.Tensor) -> Any:
        y = x * 1
        y[0].add_(y[1])  # one storage, no element shared
        return y.unbind(0)

    assert_matches_eager(add_the_next_row, _compile(add_the_next_row, strict=True), lambda: [_x(3, 4)])


def _views_after_a_custom_function(a: torch.Tensor) -> tuple[torch.Tensor, ...]:  # fuzzer s902_72
    t1 = a.unsqueeze(1)
    ReturnsInput.apply(t1.select(0, 3))
    return (t1.unbind(0)[3],)


def test_a_call_under_no_grad_leaves_grad_mode_off() -> None:
    """Fakifying a real tensor during the trace toggled grad mode through the trace's torch-function mode, which
    recorded a restore to grad mode on: the compiled function turned grad mode on inside the caller's no_grad
    block, and its result was a view with a grad_fn where eager's has none (fuzzer s902_72)."""

    def run(fn: Any) -> tuple[Any, ...]:
        a = torch.randn(4, generator=torch.Generator().manual_seed(0), requires_grad=True).mul(1)
        with torch.no_grad():
            (out,) = fn(a)
            after = torch.is_grad_enabled()
        return after, out.is_leaf, out.requires_grad, out.grad_fn, torch._C._autograd._get_creation_meta(out)

    compiled = pv.compile_function(_views_after_a_custom_function, inner="aot_eager")
    expected = run(_views_after_a_custom_function)
    assert expected[:4] == (False, True, True, None)
    assert run(compiled) == expected


def sorts_into_an_input_aliasing_another(b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> Any:
    u0 = torch.empty(0, dtype=torch.long)
    with torch.no_grad():
        torch.sort(d, 0, out=(c, u0))  # a write hidden from autograd to c, which overlaps b
    t1 = b.contiguous()
    t1.reshape(t1.shape)  # a core read of b: the core takes both inputs (fuzzer s1819_134, shrunk)
    return (t1.t(),)


def reads_and_writes_inputs_aliasing_each_other(b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> Any:
    with torch.no_grad():
        c.mul_(2)
    return b * 2, b.t()


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
@pytest.mark.parametrize("fn", [sorts_into_an_input_aliasing_another, reads_and_writes_inputs_aliasing_each_other])
def test_a_no_grad_write_to_an_input_aliasing_another_stays_hidden(entry: str, fn: Callable[..., Any]) -> None:
    """Note [Inputs that alias each other]: a write under no_grad to an input that overlaps another is replayed in
    eager. Kept in a core that reads both, AOTAutograd applied it after the compiled function with a recorded
    ``copy_`` (a synthetic base's write), so the base's history gained a ``CopyBackwards`` and the gradient of
    everything before the write became zero: a silent wrong gradient where eager's is one."""

    def run(f: Callable[..., Any]) -> tuple[str, torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        b_base = torch.randn(4, 3, generator=g).requires_grad_()
        source = b_base.mul(1)
        d = torch.randn(3, 3, generator=g).requires_grad_().mul(1)
        outs = f(source[:-1], source[1:], d)
        sum(o.sum() for o in outs).backward()
        return type(source.grad_fn).__name__, b_base.grad

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=pv.backend("aot_eager")) if entry == "backend" else pv.compile_function(fn)
    (got_fn, got_grad), (want_fn, want_grad) = run(compiled), run(fn)
    assert got_fn == want_fn == "MulBackward0"
    torch.testing.assert_close(got_grad, want_grad)


# Note [compile_function with symbolic sizes]
def _split_in_halves(x: torch.Tensor, w: torch.Tensor) -> tuple[Any, ...]:
    y = (x @ w).relu()
    n = y.size(0)
    return y.split(n // 2), y.shape, n


@pytest.mark.parametrize("rows", [[4, 6, 8], [6, 10, 7, 9]])
def test_dynamic_sizes_trace_once_per_guard_and_match_eager(rows: list[int]) -> None:
    """One trace serves every size its guards allow (4, 6, 8 rows: two halves), a size that breaks them (7 rows:
    three pieces) traces again, and every call matches eager: values, views, grad_fn types, gradients. The returned
    ``y.shape`` and ``n`` are the call's own, not the first trace's constants."""
    compiled = pv.compile_function(_split_in_halves, inner="aot_eager", strict=True, dynamic=True)
    w = _x(3, 5, seed=1)
    for n in rows:
        make_inputs = lambda n=n: [_x(n, 3), w]  # noqa: E731
        assert_matches_eager(_split_in_halves, compiled, make_inputs)
        _, shape, size = compiled(*make_inputs())
        assert type(shape) is torch.Size and shape == (n, 5) and size == n
    pieces = {(n + n // 2 - 1) // (n // 2) for n in rows}  # the guards hold while the number of pieces does
    assert len(compiled.cache) == len(pieces)


def test_dynamic_sizes_keep_eagers_error_where_the_trace_does_not_hold() -> None:
    """One row: ``split(0)`` raises in eager; the call breaks the first trace's guards, and tracing again raises
    eager's own error."""
    compiled = pv.compile_function(_split_in_halves, inner="aot_eager", strict=True, dynamic=True)
    w = _x(3, 5, seed=1)
    compiled(_x(4, 3), w)
    expected = outcome(lambda: _split_in_halves(_x(1, 3), w))
    assert outcome(lambda: compiled(_x(1, 3), w)) == expected
    assert expected[0] == "raised"


def test_dynamic_sizes_reach_the_inner_backend_as_symbols() -> None:
    """The core is compiled once, on symbolic fakes: the inner backend sees symbols, not the first call's sizes."""
    seen: list[list[Any]] = []

    def inner(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        seen.append([tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)])
        return gm.forward

    compiled = pv.compile_function(lambda x: (x * 2).unbind(0), inner=inner, strict=True, dynamic=True)
    for n in (3, 5):
        assert_matches_eager(lambda x: (x * 2).unbind(0), compiled, lambda n=n: [_x(2, n)])
    assert len(seen) == 1 and isinstance(seen[0][0][1], torch.SymInt)


def test_requires_grad_inside_runs_in_eager_under_dynamic_sizes() -> None:
    """Note [requires_grad_ inside a function] with symbolic sizes: one trace for sizes 3 and 5, no fallback."""

    def fn(x: torch.Tensor) -> Any:
        return x.detach().requires_grad_().unbind(0)

    compiled = pv.compile_function(fn, inner="aot_eager", dynamic=True, strict=True)
    for n in (3, 5, 3):
        assert_matches_eager(fn, compiled, lambda n=n: [_x(2, n)])
    assert len(compiled.cache) == 1 and all(e.eager_reason is None for e in compiled.cache.values())


def test_dynamic_sizes_decide_a_fallback_for_its_exact_sizes() -> None:
    """A function that runs eagerly (a hook inside) is decided per exact sizes under ``dynamic``: a call of another
    size is traced again rather than taking the first call's answer for every size."""

    def fn(x: torch.Tensor) -> Any:
        y = x.mul(2)
        y.register_hook(lambda g: g * 10)
        return y.unbind(0)

    compiled = pv.compile_function(fn, inner="aot_eager", dynamic=True)
    for n in (3, 5, 3):
        assert_matches_eager(fn, compiled, lambda n=n: [_x(2, n)])
    assert len(compiled.cache) == 2 and all(e.eager_reason is not None for e in compiled.cache.values())
