"""Dynamic shapes: epilogue view arguments that depend on sizes are computed from the real tensors at runtime.

With ``dynamic=True`` or ``mark_dynamic``, a split size, a ``view(-1, s)`` size, a narrow length or a chunk of a
dynamic dim is size arithmetic over graph inputs; the epilogue must recompute it on each call (no recompile per
size, no size baked in from the first call). ``unbind`` over a dynamic dim returns as many tensors as the dim
is long, so Dynamo guards on the count: one compile per length, as stock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import predispatch_views as pv
from predispatch_views.compare.stress import CountingBackend
from tests.parity_utils import alias_structure, assert_matches_eager, flat_tensors, view_nodes


def prototype(inner: str = "aot_eager") -> CountingBackend:
    return CountingBackend(pv.backend(inner, strict=True))


def stock(inner: str = "aot_eager") -> CountingBackend:
    from torch._dynamo.backends.registry import lookup_backend

    return CountingBackend(lookup_backend(inner))


def _leaf(*shape: int, requires_grad: bool = True) -> torch.Tensor:
    gen = torch.Generator().manual_seed(sum(shape) * 7 + len(shape))
    return torch.randn(*shape, generator=gen).requires_grad_(requires_grad)


# Programs whose number of outputs does not depend on the dynamic size: one compile for every size.
def split_sizes_from_size(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.mul(2)
    n = x.size(0)
    return y.split([n // 3, n - n // 3])


def view_minus_one_of_size(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.sin()
    return y.view(-1, x.size(1) * x.size(2)).unbind(1)


def narrow_length_from_size(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.mul(2)
    return y.narrow(0, 1, x.size(0) - 2).unbind(1)


def chunk_of_dynamic_dim(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.cos().chunk(2, dim=0)


def tensor_split_at_size(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.mul(3)
    return y.tensor_split([x.size(0) // 2], dim=0)


def views_of_the_split(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.mul(2)
    n = x.size(0)
    a, b = y.split([n - 2, 2])
    return a.view(-1), b.t(), a[1:]


def input_split_by_size(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # No core at all: the epilogue views a graph input with sizes computed from it.
    return x.split([x.size(0) - 1, 1])


# (program, shapes of its single input; dim 0 varies)
SIZE_ONLY: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]] = {
    "split_sizes_from_size": (split_sizes_from_size, [(6, 3), (9, 3), (7, 3), (13, 3)]),
    "view_minus_one_of_size": (view_minus_one_of_size, [(4, 2, 3), (7, 2, 3), (5, 2, 3)]),
    "narrow_length_from_size": (narrow_length_from_size, [(5, 3), (8, 3), (6, 3)]),
    "chunk_of_dynamic_dim": (chunk_of_dynamic_dim, [(4, 3), (8, 3), (6, 3), (10, 3)]),
    "tensor_split_at_size": (tensor_split_at_size, [(4, 3), (7, 3), (9, 3)]),
    "views_of_the_split": (views_of_the_split, [(5, 3), (8, 3), (6, 3)]),
    "input_split_by_size": (input_split_by_size, [(4, 3), (7, 3), (9, 3)]),
}


def _check_every_size(
    fn: Callable[..., Any], compiled: Callable[..., Any], shapes: list[tuple[int, ...]], *, mark: bool = False
) -> None:
    for shape in shapes:

        def make_inputs(shape: tuple[int, ...] = shape) -> list[torch.Tensor]:
            x = _leaf(*shape)
            if mark:
                torch._dynamo.mark_dynamic(x, 0)
            return [x]

        assert_matches_eager(fn, compiled, make_inputs)


@pytest.mark.parametrize("name", sorted(SIZE_ONLY))
def test_size_dependent_epilogue_compiles_once(name: str) -> None:
    fn, shapes = SIZE_ONLY[name]
    backend = prototype()
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    _check_every_size(fn, compiled, shapes + shapes[:1])
    assert backend.graphs == 1


@pytest.mark.parametrize("name", ["split_sizes_from_size", "narrow_length_from_size", "views_of_the_split"])
def test_mark_dynamic_compiles_once(name: str) -> None:
    fn, shapes = SIZE_ONLY[name]
    backend = prototype()
    compiled = torch.compile(fn, backend=backend)
    _check_every_size(fn, compiled, shapes, mark=True)
    assert backend.graphs == 1


def test_automatic_dynamic_recompiles_once_then_never() -> None:
    """Without dynamic=True Dynamo compiles static, then once dynamic on the second size; never again."""
    fn = split_sizes_from_size
    backend = prototype()
    compiled = torch.compile(fn, backend=backend)
    _check_every_size(fn, compiled, [(6, 3), (9, 3), (12, 3), (15, 3), (7, 3)])
    assert backend.graphs == 2


def test_no_stale_sizes_when_sizes_come_back() -> None:
    """Sizes are read from each call's tensors: going back and forth between sizes gives each one's split."""
    backend = prototype()
    compiled = torch.compile(split_sizes_from_size, backend=backend, dynamic=True)
    for n in (6, 30, 6, 11, 30, 7):
        x = _leaf(n, 2)
        outs = compiled(x)
        assert [o.shape[0] for o in outs] == [n // 3, n - n // 3]
        assert all(o._base is outs[0]._base for o in outs)
        for o, e in zip(outs, split_sizes_from_size(x)):
            torch.testing.assert_close(o, e)
    assert backend.graphs == 1


def test_view_minus_one_with_int_argument() -> None:
    """``view(-1, s)`` with s a Python int argument: no more compiles than stock, and the right shapes."""

    def fn(x: torch.Tensor, s: int) -> tuple[torch.Tensor, ...]:
        return x.mul(2).view(-1, s).unbind(0)

    calls = [((4, 6), 3), ((4, 6), 8), ((4, 5), 10), ((6, 5), 3), ((4, 6), 4)]
    counts = {}
    for label, backend in (("stock", stock()), ("prototype", prototype())):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=backend, dynamic=True)
        for shape, s in calls:
            x = _leaf(*shape)
            outs, expected = compiled(x, s), fn(x, s)
            assert len(outs) == len(expected)
            for o, e in zip(outs, expected):
                torch.testing.assert_close(o, e)
            if label == "prototype":
                assert alias_structure([x], list(outs)) == alias_structure([x], list(expected))
        counts[label] = backend.graphs
    assert counts["prototype"] <= counts["stock"]


@pytest.mark.parametrize("how", ["dynamic", "maybe_mark_dynamic"])
def test_unbind_over_a_dynamic_dim_guards_on_the_count(how: str) -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x.mul(2).unbind(0)

    lengths = [3, 4, 5, 4, 3, 6]
    counts = {}
    for label, backend in (("stock", stock()), ("prototype", prototype())):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=backend, dynamic=True if how == "dynamic" else None)
        for n in lengths:
            x = _leaf(n, 3)
            if how == "maybe_mark_dynamic":  # mark_dynamic would reject the specialization unbind forces
                torch._dynamo.maybe_mark_dynamic(x, 0)
            outs = compiled(x)
            assert len(outs) == n
            if label == "prototype":
                assert view_nodes(list(outs)) == {"UnbindBackward0": 1}
                assert all(o._base is outs[0]._base for o in outs)
                for o, e in zip(outs, fn(x)):
                    torch.testing.assert_close(o, e)
        counts[label] = backend.graphs
    assert counts["prototype"] == counts["stock"] == len(set(lengths))


def test_chunk_count_change_recompiles_like_stock() -> None:
    """chunk(3) of a dynamic dim: the number of chunks depends on the size; the prototype recompiles no more often
    than stock."""

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x.sin().chunk(3, dim=1)

    widths = [6, 9, 12, 7, 4, 9]
    counts = {}
    for label, backend in (("stock", stock()), ("prototype", prototype())):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=backend, dynamic=True)
        for w in widths:
            x = _leaf(2, w)
            outs, expected = compiled(x), fn(x)
            assert [o.shape for o in outs] == [e.shape for e in expected]
            if label == "prototype":
                assert view_nodes(list(outs)) == view_nodes(list(expected))
                for o, e in zip(outs, expected):
                    torch.testing.assert_close(o, e)
        counts[label] = backend.graphs
    # Sliced on Dynamo's graph (Note [Slicing Dynamo's graph]), the prototype adds no guard of its own: Dynamo's
    # guard on the chunk count is all it needs, where stock's trace of the chunk outputs guards on more (3 graphs
    # for these widths, the prototype 2).
    assert counts["prototype"] <= counts["stock"]


def test_dynamic_backward_through_size_dependent_split() -> None:
    """Gradients through a dynamic split flow to the right rows for each size."""
    backend = prototype()
    compiled = torch.compile(split_sizes_from_size, backend=backend, dynamic=True)
    for n in (6, 10, 8):
        x_c, x_e = _leaf(n, 3), _leaf(n, 3)
        outs_c, outs_e = compiled(x_c), split_sizes_from_size(x_e)
        (outs_c[0].sum() * 2 + outs_c[1].pow(2).sum()).backward()
        (outs_e[0].sum() * 2 + outs_e[1].pow(2).sum()).backward()
        torch.testing.assert_close(x_c.grad, x_e.grad)
        assert {type(o.grad_fn).__name__ for o in outs_c} == {"SplitWithSizesBackward0"}
    assert backend.graphs == 1


def test_dynamic_shapes_with_inductor() -> None:
    fn = views_of_the_split
    backend = prototype("inductor")
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    for n in (5, 9, 7):
        x = _leaf(n, 3)
        outs, expected = compiled(x), fn(x)
        for o, e in zip(outs, expected):
            torch.testing.assert_close(o, e)
        assert alias_structure([x], list(outs)) == alias_structure([x], list(expected))
        assert view_nodes(flat_tensors(outs)) == view_nodes(flat_tensors(expected))
    assert backend.graphs == 1


def split_of_concatenation(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = torch.cat([x, y])
    n = z.size(0)
    return z.sin().split([1, n - 1])


def test_split_sizes_from_an_intermediate_size() -> None:
    """The size is an intermediate's (a cat of two dynamic inputs), not an input's."""
    backend = prototype()
    compiled = torch.compile(split_of_concatenation, backend=backend, dynamic=True)
    for n in (3, 5, 8):
        _check_pair(split_of_concatenation, compiled, lambda n=n: [_leaf(n, 2), _leaf(n + 1, 2, requires_grad=False)])
    assert backend.graphs == 1


def split_of_nonzero(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    idx = (x > 0).nonzero()
    n = idx.size(0)
    return idx.float().mul(2).split([n // 2, n - n // 2])


def test_split_sizes_from_a_data_dependent_size() -> None:
    """nonzero's length is an unbacked symbol computed in the core; the epilogue splits by it."""
    backend = prototype()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        compiled = torch.compile(split_of_nonzero, backend=backend)
        for n in (5, 9, 6):
            _check_pair(split_of_nonzero, compiled, lambda n=n: [_leaf(n, 3, requires_grad=False)])
    assert backend.graphs <= 2


def _check_pair(fn: Callable[..., Any], compiled: Callable[..., Any], make_inputs: Callable[[], list[Any]]) -> None:
    inputs = make_inputs()
    outs, expected = compiled(*inputs), fn(*inputs)
    assert [o.shape for o in outs] == [e.shape for e in expected]
    for o, e in zip(outs, expected):
        torch.testing.assert_close(o, e)
    assert alias_structure(inputs, list(outs)) == alias_structure(inputs, list(expected))


# Note [make_fx's lazy size reads]: a size bound when a tensor was made, read after an in-place metadata write to
# it. Every write, with and without a graph break before it (a graph that starts at a break goes to the capture).
METADATA_WRITES: dict[str, Callable[[torch.Tensor], Any]] = {
    "transpose_": lambda t: t.transpose_(0, 1),
    "t_": lambda t: t.t_(),
    "swapdims_": lambda t: t.swapdims_(1, 0),
    "unsqueeze_": lambda t: t.unsqueeze_(0),
}


def _metadata_write_program(write: str, graph_break: bool) -> Callable[..., Any]:
    def program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x.mul(2)
        if graph_break:
            torch._dynamo.graph_break()
        _, b = y.tensor_split(2, 1)  # b's last size is a new symbol, bound to a size read of b
        METADATA_WRITES[write](b)
        c = b.sin().reshape(b.shape)  # the shape after the write
        c.add_(1.0)
        return c.chunk(2, dim=-1)

    return program


@pytest.mark.parametrize("graph_break", [False, True])
@pytest.mark.parametrize("write", sorted(METADATA_WRITES))
def test_a_size_read_after_a_metadata_write(write: str, graph_break: bool) -> None:
    """Fuzzer s1810_805: the capture read the size after the write (reshape raised "shape '[2, 2]' is invalid")."""
    fn = _metadata_write_program(write, graph_break)
    compiled = torch.compile(fn, backend=pv.backend("aot_eager"), dynamic=True)
    _check_every_size(fn, compiled, [(4, 3), (6, 5), (5, 7)])


def scaled_by_a_symbolic_int_then_written(a: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    total = a.sum(2)
    scaled = total.mul(k)  # k is a SymInt once the int is dynamic: mul's backward reads k, never ``total``
    flat = total.view(-1)
    activated = total.tanh()
    part = flat[1:3]
    flat.unsqueeze_(1)  # a write to ``total``'s storage after the views: replayed in the epilogue
    return activated, part, scaled


@pytest.mark.parametrize("how", ["dynamic=True", "automatic"])
def test_a_write_after_mul_by_a_symbolic_int(how: str) -> None:
    """Fuzzer s1826_747: what ``mul`` by a SymInt saves was asked of torch with the SymInt itself, the trace failed,
    and the answer "anything may be read" made the later ``unsqueeze_`` of its input fall back (strict raises)."""
    fn = scaled_by_a_symbolic_int_then_written
    torch._dynamo.reset()
    compiled = torch.compile(
        fn, backend=pv.backend("aot_eager", strict=True), dynamic=True if how != "automatic" else None
    )
    for n, k in [(2, 1), (4, 4), (3, 2)]:
        assert_matches_eager(fn, compiled, lambda n=n, k=k: [_leaf(1, 4, n), k])
        outs, expected = compiled(_leaf(1, 4, n), k), fn(_leaf(1, 4, n), k)
        assert outs[1]._is_view() and expected[1]._is_view()
