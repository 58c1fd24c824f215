"""Each strategy under comparison, checked by the autograd graph it gives the seed program ``x.mul(2).unbind(0)``.

If a strategy silently stopped being what its name says (stock_no_fix replaying stock's artifact, say), every
parity number about it would be wrong; these tests pin each one down.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch

import predispatch_views
from predispatch_views.compare.parity import _isolated
from predispatch_views.compare.strategies import (
    CEILING,
    INNERS,
    Strategy,
    all_strategies,
    dynamo_eager,
    eager,
    legacy_as_strided,
    parity_strategies,
    prototype,
    slice_regen,
    stock,
    stock_no_fix,
)


def seed(x: torch.Tensor) -> Any:
    return x.mul(2).unbind(0)


def outputs(strategy: Strategy, fn: Callable[..., Any] = seed) -> tuple[torch.Tensor, ...]:
    torch._dynamo.reset()
    x = torch.randn(3, 4, requires_grad=True)
    return tuple(strategy.make(fn)(x))


def reachable(outs: tuple[torch.Tensor, ...]) -> Counter[str]:
    """Autograd nodes by type reachable from the outputs, each node counted once."""
    seen: set[Any] = set()
    stack = [o.grad_fn for o in outs if o.grad_fn is not None]
    counts: Counter[str] = Counter()
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        counts[type(fn).__name__] += 1
        stack.extend(f for f, _ in fn.next_functions if f is not None)
    return counts


@pytest.fixture(autouse=True)
def _no_autograd_cache() -> Any:
    # As the parity harness runs them (see test_autograd_cache_keeps_strategies_apart for why).
    with _isolated():
        yield


def test_eager_reference() -> None:
    outs = outputs(eager())
    assert all(o._is_view() for o in outs)
    assert {o.grad_fn for o in outs} == {outs[0].grad_fn}
    assert reachable(outs)["UnbindBackward0"] == 1


@pytest.mark.parametrize("inner", INNERS)
def test_stock_hides_the_views(inner: str) -> None:
    outs = outputs(stock(inner))
    assert not any(o._is_view() for o in outs)
    assert {type(o.grad_fn).__name__ for o in outs} == {"CompiledFunctionBackward"}


@pytest.mark.parametrize("inner", INNERS)
def test_stock_no_fix_regenerates_each_output(inner: str) -> None:
    outs = outputs(stock_no_fix(inner))
    assert all(o._is_view() for o in outs)
    assert [type(o.grad_fn).__name__ for o in outs] == ["UnbindBackward0"] * len(outs)
    assert len({o.grad_fn for o in outs}) == len(outs)  # one node per output, not eager's shared one
    assert reachable(outs)["UnbindBackward0"] == len(outs)


@pytest.mark.parametrize("inner", INNERS)
def test_legacy_as_strided_regenerates_with_as_strided(inner: str) -> None:
    outs = outputs(legacy_as_strided(inner))
    assert all(o._is_view() for o in outs)
    assert [type(o.grad_fn).__name__ for o in outs] == ["AsStridedBackward0"] * len(outs)
    assert reachable(outs)["AsStridedBackward0"] == len(outs)
    assert reachable(outs)["UnbindBackward0"] == 0


def _inplace_error(out: torch.Tensor) -> str:
    with pytest.raises(RuntimeError) as info:
        out.mul_(2)
    return str(info.value)


def test_slice_regen_selects_each_output_and_keeps_the_inplace_error() -> None:
    # aot_eager only: the regeneration happens in AOTAutograd's runtime wrapper, whatever the inner compiler.
    outs = outputs(slice_regen("aot_eager"))
    eager_outs = outputs(eager())
    assert all(o._is_view() for o in outs)
    assert [type(o.grad_fn).__name__ for o in outs] == ["SelectBackward0"] * len(outs)
    nodes = reachable(outs)
    assert nodes["SelectBackward0"] == len(outs)
    assert nodes["AsStridedBackward0"] == nodes["UnbindBackward0"] == 0
    # Eager's error, but naming the select that regenerated the output instead of the unbind.
    for i, (o, e) in enumerate(zip(outs, eager_outs)):
        expected = _inplace_error(e)
        assert expected.startswith(f"Output {i} of Unbind is a view")
        assert _inplace_error(o) == expected.replace(f"Output {i} of Unbind", "Output 0 of Select")


def test_slice_regen_narrows_split_outputs() -> None:
    def split(x: torch.Tensor) -> Any:
        return x.mul(2).split([1, 3], 1) + x.mul(3).chunk(2, 1)

    outs, eager_outs = outputs(slice_regen("aot_eager"), split), outputs(eager(), split)
    assert [type(o.grad_fn).__name__ for o in outs] == ["SliceBackward0"] * 4
    for o, e in zip(outs, eager_outs):
        assert (o.shape, o.stride(), o.storage_offset()) == (e.shape, e.stride(), e.storage_offset())
        assert "This view is the output of a function that returns multiple views" in _inplace_error(o)


@pytest.mark.parametrize("inner", INNERS)
def test_prototype_has_eagers_single_unbind(inner: str) -> None:
    predispatch_views.FALLBACKS.clear()
    outs = outputs(prototype(inner))
    assert not predispatch_views.FALLBACKS
    assert all(o._is_view() for o in outs)
    assert {o._base for o in outs} == {outs[0]._base}
    assert [type(o.grad_fn).__name__ for o in outs] == ["UnbindBackward0"] * len(outs)
    assert reachable(outs)["UnbindBackward0"] == 1
    assert reachable(outs)["AsStridedBackward0"] == 0


def test_the_ceiling_is_dynamo_alone_with_eagers_graph() -> None:
    """dynamo_eager (issue 22): Dynamo captures the program (one graph) and runs it as it is: eager's views, one
    UnbindBackward0, eager's in-place error."""
    from torch._dynamo.utils import counters

    counters.clear()
    outs, eager_outs = outputs(dynamo_eager()), outputs(eager())
    assert counters["stats"]["unique_graphs"] == 1
    assert all(o._is_view() for o in outs)
    assert {o._base for o in outs} == {outs[0]._base}
    assert reachable(outs) == reachable(eager_outs)
    assert reachable(outs)["UnbindBackward0"] == 1
    assert [_inplace_error(o) for o in outs] == [_inplace_error(e) for e in eager_outs]


def test_the_ceiling_is_in_the_parity_table_once_and_not_in_the_benchmarks() -> None:
    labels = [s.label for s in parity_strategies(INNERS)]
    assert [label for label in labels if label.startswith(CEILING)] == ["dynamo_eager[eager]"]
    assert labels.index("dynamo_eager[eager]") == 1
    assert not any(s.name == CEILING for s in all_strategies(INNERS))


def test_autograd_cache_keeps_strategies_apart() -> None:
    with torch._functorch.config.patch(enable_autograd_cache=True):
        outputs(stock("inductor"))
        outs = outputs(stock_no_fix("inductor"))
    assert [type(o.grad_fn).__name__ for o in outs] == ["UnbindBackward0"] * len(outs)


def test_slice_regen_differs_from_eager_only_in_view_node_names() -> None:
    from predispatch_views.compare.probes import Raised, first_difference
    from predispatch_views.compare.report import _without_view_node_names

    def observe(outs: tuple[torch.Tensor, ...]) -> list[Any]:
        observed: list[Any] = [type(o.grad_fn).__name__ for o in outs]
        for o in outs:
            try:
                o.mul_(2)
            except RuntimeError as e:
                observed.append(Raised.of(e))
        return observed

    expected, actual = observe(outputs(eager())), observe(outputs(slice_regen("aot_eager")))
    assert first_difference(expected, actual) is not None
    assert first_difference(_without_view_node_names(expected), _without_view_node_names(actual)) is None
