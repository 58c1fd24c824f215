"""Programs the engine cannot replay, and programs that are wrong in eager.

- Metadata or storage mutation of an input (``t_``, ``resize_``, ``set_``): the pipeline falls back to stock with
  a logged reason (logger "predispatch_views", ``FALLBACKS``), or raises ``StrictModeError`` with that reason when
  strict; the result still matches eager. Under Dynamo these ops graph-break before the backend sees them.
- Inputs that alias each other while the graph mutates one: replayed with one shared base; matches eager.
- Programs that are wrong in eager (in-place on an unbind output, on a leaf requiring grad, on a view of one):
  eager's exception type and message. Without Dynamo the engine raises them as eager does; under Dynamo,
  Dynamo raises them while tracing, as a ``TorchRuntimeError`` (a ``RuntimeError``) quoting eager's message,
  as it does for stock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

import predispatch_views as pv
from tests.parity_utils import alias_structure, outcome

LOGGER = "predispatch_views"


def _arange(*shape: int, requires_grad: bool = False) -> torch.Tensor:
    numel = 1
    for s in shape:
        numel *= s
    return torch.arange(float(numel)).reshape(shape).clone().requires_grad_(requires_grad)


def observe(fn: Callable[..., Any], make_inputs: Callable[[], list[Any]]) -> list[Any]:
    """Outputs, inputs after the call (metadata and values), aliasing, grad_fn types, gradients."""
    inputs = make_inputs()
    leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf]
    result = outcome(lambda: fn(*inputs))
    if result[0] == "raised":
        return [result]
    outs = [t for t in pytree.tree_leaves(result[1]) if isinstance(t, torch.Tensor)]
    obs: list[Any] = [pytree.tree_structure(result[1])]
    obs += [(o.shape, o.stride(), o.detach().clone()) for o in outs]
    obs += [(i.shape, i.stride(), i.storage_offset(), i.detach().clone()) for i in inputs]
    obs.append(alias_structure(inputs, outs))
    obs.append(outcome(lambda: [type(o.grad_fn).__name__ for o in outs]))

    def backward() -> list[Any]:
        grads = [o for o in outs if o.requires_grad]
        if grads:
            sum((o * (k + 1)).sum() for k, o in enumerate(grads)).backward()
        return [t.grad for t in leaves]

    obs.append(outcome(backward))
    return obs


def assert_same(actual: Any, expected: Any) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor)
        torch.testing.assert_close(actual, expected)
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), (actual, expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    else:
        assert actual == expected


# Programs the pipeline cannot replay: each falls back with this reason.


def transpose_input_in_place(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.sin()  # saves x: the uncompiled segment around t_ starts here (Note [Segments]), and nothing is left
    x.t_()
    return (*y.unbind(0), x)


def resize_input(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    x.resize_(2, 6)
    return x.mul(2).unbind(0)


def resize_intermediate(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.mul(2)
    y.resize_(12)
    return y.split(4)


def resize_under_a_kept_view(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.mul(2)
    row = y[0]  # keeps y's old storage once resize_ grows it
    y.resize_(5, 4)
    return row, *y[:3].split(1)


def set_input(x: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
    x.set_(z)
    return x.mul(2).unbind(0)


def set_input_under_a_kept_view(x: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
    flat = x.view(-1)  # keeps x's old storage once set_ swaps it
    x.set_(z)
    flat.mul_(2)
    return x.mul(2).unbind(0)


def seed_then_draw(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(42)  # OpInfo's wrapper_set_seed: the values depend on it, the trace does not record it
    return x.mul(1).normal_().unbind(0)


FALLBACK_PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], list[Any]], str]] = {
    "manual_seed": (seed_then_draw, lambda: [_arange(3, 4)], "sets the random number generator"),
    "resize_under_a_kept_view": (
        resize_under_a_kept_view,
        lambda: [_arange(3, 4)],  # eager refuses to resize a tensor that requires grad
        "aten.resize_.default changes a tensor's storage",
    ),
    # Note [set_ between segments]: a set_ runs in eager between segments, but not under a view kept across it.
    "set_": (
        set_input_under_a_kept_view,
        lambda: [_arange(3, 4), torch.ones(2, 5)],
        "aten.set_.source_Tensor changes a tensor's storage",
    ),
    # AOTAutograd would apply x.t_() after the region in one step, not with eager's version bumps; Dynamo breaks
    # the graph there (fuzzer s41_188, s53_604, s52_634).
    "transpose_input": (
        transpose_input_in_place,
        lambda: [_arange(3, 4).requires_grad_().mul(1)],
        "an input's own metadata mutation",
    ),
}


@pytest.mark.parametrize("name", sorted(FALLBACK_PROGRAMS))
def test_unreplayable_program_falls_back_with_a_logged_reason(name: str, caplog: pytest.LogCaptureFixture) -> None:
    fn, make_inputs, reason = FALLBACK_PROGRAMS[name]
    caplog.set_level(logging.INFO, logger=LOGGER)
    pv.FALLBACKS.clear()
    compiled = pv.compile_function(fn, inner="aot_eager")
    actual = observe(compiled, make_inputs)
    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    # compile_function runs such a function eagerly (Note [compile_function falls back to eager]).
    assert any(m.startswith("compile_function runs the function eagerly: ") and reason in m for m in logged), logged
    assert len(pv.FALLBACKS) == 1 and reason in pv.FALLBACKS[0][1]
    assert_same(actual, observe(fn, make_inputs))


@pytest.mark.parametrize("name", sorted(FALLBACK_PROGRAMS))
def test_unreplayable_program_in_strict_mode_raises_the_reason(name: str) -> None:
    fn, make_inputs, reason = FALLBACK_PROGRAMS[name]
    compiled = pv.compile_function(fn, inner="aot_eager", strict=True)
    with pytest.raises(pv.StrictModeError, match=reason.replace("(", r"\(").replace(".", r"\.")):
        compiled(*make_inputs())


@pytest.mark.parametrize("name", sorted(set(FALLBACK_PROGRAMS) - {"set_", "resize_under_a_kept_view"}))
def test_unreplayable_program_under_dynamo_matches_eager_and_stock(name: str) -> None:
    """Dynamo graph-breaks on these ops: the rest compiles (strict: no fallback needed) and matches eager. (A storage
    change under a kept view reaches the backend whole where Dynamo traces it, and falls back to stock.)"""
    fn, make_inputs, _ = FALLBACK_PROGRAMS[name]
    expected = observe(fn, make_inputs)
    actual = observe(torch.compile(fn, backend=pv.backend("aot_eager", strict=True)), make_inputs)
    assert_same(actual, expected)
    torch._dynamo.reset()
    stock = observe(torch.compile(fn, backend="aot_eager"), make_inputs)
    assert_same(stock[:-3], expected[:-3])  # stock's outputs are not views: compare values and inputs only


def test_dynamo_graph_with_a_storage_mutation_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    """The backend path: a Dynamo graph that resizes an intermediate reaches the pipeline and falls back."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    pv.FALLBACKS.clear()

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x.mul(2)
        torch.ops.aten.resize_(y, [12])
        return y.split(4)

    make_inputs = lambda: [_arange(3, 4)]  # noqa: E731
    actual = observe(torch.compile(fn, backend=pv.backend("aot_eager")), make_inputs)
    reasons = [reason for _, reason in pv.FALLBACKS]
    if not reasons:
        pytest.skip("Dynamo graph-broke on resize_: the pipeline never saw it")
    assert any("resize_" in r for r in reasons)
    assert any("falling back to stock AOTAutograd" in r.getMessage() for r in caplog.records if r.name == LOGGER)
    assert_same(actual[1:-3], observe(fn, make_inputs)[1:-3])


# Inputs that alias each other while the graph mutates one of them.


def mutate_one_view_the_other(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    x.add_(1)
    return y.unbind(0)


def mutate_the_other_view_one(x: torch.Tensor, y: torch.Tensor) -> tuple[Any, ...]:
    y.mul_(2)
    return x.unbind(0), y.sum()


def views_then_mutate_the_alias(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    outs = y.unbind(0)
    x.mul_(3)  # eager: the outputs' grad_fn now raises (their base was modified in place)
    return outs


def views_of_both(x: torch.Tensor, y: torch.Tensor) -> tuple[Any, ...]:
    outs = x.mul(2).unbind(0)
    y.add_(1)
    return outs, y.unbind(1)


def _overlapping(requires_grad: bool) -> Callable[[], list[torch.Tensor]]:
    def make() -> list[torch.Tensor]:
        base = _arange(4, 3, requires_grad=requires_grad)
        base = base.mul(1) if requires_grad else base
        return [base[:3], base[1:]]

    return make


ALIASING = {
    "mutate_one_view_the_other": mutate_one_view_the_other,
    "mutate_the_other_view_one": mutate_the_other_view_one,
    "views_then_mutate_the_alias": views_then_mutate_the_alias,
    "views_of_both": views_of_both,
}


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "grad"])
@pytest.mark.parametrize("entry", ["backend", "compile_function"])
@pytest.mark.parametrize("name", sorted(ALIASING))
def test_aliased_inputs_with_a_mutation_match_eager(name: str, entry: str, requires_grad: bool) -> None:
    fn = ALIASING[name]
    make_inputs = _overlapping(requires_grad)
    if entry == "backend":
        compiled = torch.compile(fn, backend=pv.backend("aot_eager", strict=True))
    else:
        compiled = pv.compile_function(fn, inner="aot_eager", strict=True)
    expected, actual = observe(fn, make_inputs), observe(compiled, make_inputs)
    if name == "mutate_the_other_view_one" and requires_grad:  # the core computes y.sum(): compiled grad_fn
        assert expected[-2][1][-1] == "SumBackward0" and actual[-2][1][-1] == "CompiledFunctionBackward"
        expected[-2], actual[-2] = expected[-2][1][:-1], actual[-2][1][:-1]
    assert_same(actual, expected)


# Programs that are wrong in eager.


def mutate_unbind_output(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a, b, c = x.mul(2).unbind(0)
    a.mul_(3)
    return a, b, c


def mutate_split_output_then_view(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    outs = x.mul(2).split(1)
    outs[1].add_(1)
    return tuple(o.view(-1) for o in outs)


def in_place_on_leaf(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    x.add_(1)
    return x.unbind(0)


def in_place_on_view_of_leaf(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    outs = x.unbind(0)
    outs[0].add_(1)
    return outs


def in_place_on_slice_of_leaf(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    x[0].zero_()
    return x.chunk(3)


WRONG_IN_EAGER = {
    "mutate_unbind_output": mutate_unbind_output,
    "mutate_split_output_then_view": mutate_split_output_then_view,
    "in_place_on_leaf": in_place_on_leaf,
    "in_place_on_view_of_leaf": in_place_on_view_of_leaf,
    "in_place_on_slice_of_leaf": in_place_on_slice_of_leaf,
}


def _eager_error(fn: Callable[..., Any]) -> tuple[type[BaseException], str]:
    with pytest.raises(RuntimeError) as info:
        fn(_arange(3, 4, requires_grad=True))
    return type(info.value), str(info.value)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("name", sorted(WRONG_IN_EAGER))
def test_wrong_in_eager_raises_eagers_error_without_dynamo(name: str, strict: bool) -> None:
    fn = WRONG_IN_EAGER[name]
    error_type, message = _eager_error(fn)
    compiled = pv.compile_function(fn, inner="aot_eager", strict=strict)
    with pytest.raises(BaseException) as info:
        compiled(_arange(3, 4, requires_grad=True))
    assert type(info.value) is error_type
    assert str(info.value) == message


@pytest.mark.parametrize("name", sorted(WRONG_IN_EAGER))
def test_wrong_in_eager_raises_eagers_error_under_dynamo(name: str) -> None:
    fn = WRONG_IN_EAGER[name]
    _, message = _eager_error(fn)
    errors = []
    for backend in (pv.backend("aot_eager", strict=True), "aot_eager"):
        torch._dynamo.reset()
        with pytest.raises(RuntimeError) as info:
            torch.compile(fn, backend=backend)(_arange(3, 4, requires_grad=True))
        assert message in str(info.value)
        errors.append(type(info.value))
    assert errors[0] is errors[1]  # whatever Dynamo wraps eager's error in, the prototype changes nothing


def test_wrong_only_when_the_input_requires_grad() -> None:
    """Same program, leaf without grad then with: fine, then eager's error (a recompile, not a stale graph)."""
    compiled = torch.compile(in_place_on_leaf, backend=pv.backend("aot_eager", strict=True))
    x = _arange(3, 4)
    outs = compiled(x)
    assert all(o._base is x for o in outs)
    torch.testing.assert_close(torch.stack(outs), _arange(3, 4) + 1)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        compiled(_arange(3, 4, requires_grad=True))


@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_a_sparse_input_runs_eagerly_with_a_reason(layout: str) -> None:
    # OpInfo's sparse.sampled_addmm: the cache key read the storage of a sparse input and crashed.
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x * 2).to_dense().unbind(0)

    def make() -> torch.Tensor:
        dense = _arange(3, 3)
        return dense.to_sparse_csr() if layout == "csr" else dense.to_sparse()

    pv.FALLBACKS.clear()
    got = pv.compile_function(fn, inner="aot_eager")(make())
    assert_same(list(got), list(fn(make())))
    assert [r for _, r in pv.FALLBACKS] == [
        f"an input of layout torch.sparse_{layout}: the capture traces strided tensors"
    ]


def set_inside_no_grad(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    b = torch.arange(12, dtype=x.dtype).reshape(3, 4)
    with torch.no_grad():
        x.set_(b)
    return (x * b).unbind(0)


def set_steals_a_view_chain(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a_ = a.mul(2)
    b_slice = b.mul(2)[1].view(3, 4)
    a_.set_(b_slice)
    a_.view(-1).mul_(2)
    return (a_ * b_slice).split(1)


@pytest.mark.parametrize("entry", ["compile_function", "backend"])
@pytest.mark.parametrize(
    "fn, make_inputs",
    [
        (set_input, lambda: [_arange(3, 4), torch.ones(2, 5)]),
        (resize_input, lambda: [_arange(3, 4)]),
        (resize_intermediate, lambda: [_arange(3, 4)]),
        (set_inside_no_grad, lambda: [_arange(3, 4)]),
        (set_steals_a_view_chain, lambda: [_arange(3, 4), _arange(3, 12)]),
    ],
)
def test_a_storage_change_runs_in_eager_between_segments(
    fn: Callable[..., Any], make_inputs: Callable[[], list[Any]], entry: str
) -> None:
    """Note [set_ between segments]: compile_function ran these eagerly ("changes a tensor's storage"); the program
    is now cut around the set_ or resize_, which runs on the real tensors, and matches eager with no fallback."""
    torch._dynamo.reset()
    compiled = (
        pv.compile_function(fn, inner="aot_eager", strict=True)
        if entry == "compile_function"
        else torch.compile(fn, backend=pv.backend("aot_eager", strict=True))
    )
    assert_same(observe(compiled, make_inputs), observe(fn, make_inputs))


def set_and_set_back(a: torch.Tensor) -> tuple[torch.Tensor, ...]:  # upstream test_input_mutation_set__nop
    b = torch.arange(12, dtype=a.dtype)
    a_old = torch.ops.aten.alias.default(a)
    with torch.no_grad():
        a.set_(b)
        a.set_(a_old)
    return (a + b.reshape(3, 4)).unbind(0)


def test_an_input_metadata_mutation_inside_no_grad_runs_in_eager_with_its_region() -> None:
    """compile_function refused the cut around ``a.set_(a_old)`` ("the call runs inside a grad-mode region") and ran
    the function eagerly; the uncompiled segment now holds the whole ``with torch.no_grad()`` region."""
    make_inputs = lambda: [_arange(3, 4).requires_grad_().mul(1)]  # noqa: E731
    compiled = pv.compile_function(set_and_set_back, inner="aot_eager", strict=True)
    assert_same(observe(compiled, make_inputs), observe(set_and_set_back, make_inputs))
