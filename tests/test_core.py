"""The core engine against eager: values, gradients, view structure, grad_fn types, in-place errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import predispatch_views as pv
from tests.parity_utils import assert_matches_eager, flat_tensors, view_nodes


def seed(x):
    intermediate = x.mul(2)
    return intermediate.unbind(0)


def _leaf(*shape: int, requires_grad: bool = True, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(sum(shape) + len(shape))
    return torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_(requires_grad)


def _inputs(*tensors: Callable[[], Any]) -> Callable[[], list[Any]]:
    return lambda: [t() for t in tensors]


def backend_aot_eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    return torch.compile(fn, backend=pv.backend("aot_eager", strict=True))


def function_aot_eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    return pv.compile_function(fn, inner="aot_eager", strict=True)


ENTRY_POINTS = {"backend": backend_aot_eager, "compile_function": function_aot_eager}


def _seed_inputs() -> list[torch.Tensor]:
    return [_leaf(5, 4)]


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_seed_matches_eager(entry: str) -> None:
    assert_matches_eager(seed, ENTRY_POINTS[entry](seed), _seed_inputs)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_seed_autograd_graph_is_eagers(entry: str) -> None:
    x = _leaf(50, 8)
    outs = ENTRY_POINTS[entry](seed)(x)
    assert view_nodes(list(outs)) == {"UnbindBackward0": 1}
    assert all(o._is_view() and o._base is outs[0]._base for o in outs)
    with pytest.raises(RuntimeError, match="Output 0 of Unbind is a view") as compiled_err:
        outs[0].mul_(2)
    with pytest.raises(RuntimeError) as eager_err:
        seed(x)[0].mul_(2)
    assert str(compiled_err.value) == str(eager_err.value)


def test_seed_through_the_registered_name_with_inductor() -> None:
    x = _leaf(6, 4)
    compiled = torch.compile(seed, backend="predispatch_views")
    assert_matches_eager(seed, compiled, lambda: [x.detach().clone().requires_grad_()])


def test_seed_through_the_experimental_flag() -> None:
    x = _leaf(6, 4)
    with pv.enable():
        outs = torch.compile(seed)(x)
    assert view_nodes(list(outs)) == {"UnbindBackward0": 1}
    assert not pv.is_enabled()
    torch._dynamo.reset()
    stock_outs = torch.compile(seed)(x)  # flag off again: stock hides the aliasing
    assert type(stock_outs[0].grad_fn).__name__ == "CompiledFunctionBackward"


def test_environment_variable_enables_the_flag() -> None:
    import subprocess
    import sys

    code = "import predispatch_views as pv; print(pv.is_enabled())"
    env = {"PREDISPATCH_VIEWS": "1", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def _t(*shape: int) -> Callable[[], torch.Tensor]:
    return lambda: _leaf(*shape)


def _views_under_no_grad(x):
    y = x.mul(2)
    with torch.no_grad():
        z = y.unbind(0)
    return z, y.split(1)


def _t_then_unbind(x):
    y = x.mul(2)
    y.t_()
    return y.unbind(0)


def _transpose_view_and_sum(x):
    y = x.mul(2)
    v = y.view(-1, 2)
    v.transpose_(0, 1)
    return v, y.sum()


def _unbind_then_t(x):
    y = x.mul(2)
    outs = y.unbind(0)
    y.t_()
    return outs


def _unsqueeze_sum_unbind(x):
    y = x.mul(2)
    y.unsqueeze_(0)
    return y.unbind(1), y.sum()


def _unbind_add_sum(x):
    y = x.mul(2) if x.requires_grad else x
    outs = y.unbind(0)
    y.add_(1)
    return outs, y.sum()


def _t_input_then_compute(x):
    x.t_()
    return x.mul(2).unbind(0), x.sum()


def _two_views_of_one_base() -> list[torch.Tensor]:
    base = _leaf(2, 3, 4).mul(1)
    return [base[0], base[1]]


def _mutate_a_view_b(a, b):
    a.mul_(2)
    return b.unbind(0), a.unbind(1)


def _view_b_mutate_a(a, b):
    outs = b.unbind(0)
    a.mul_(2)
    return outs


PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], list[Any]]]] = {
    "unbind_dim1": (lambda x: x.mul(2).unbind(1), _inputs(_t(3, 4))),
    "unbind_last": (lambda x: x.sin().unbind(-1), _inputs(_t(2, 3, 4))),
    "split": (lambda x: x.mul(2).split(2), _inputs(_t(5, 3))),
    "split_dim1": (lambda x: x.mul(2).split(2, dim=1), _inputs(_t(3, 5))),
    "split_with_sizes": (lambda x: x.mul(2).split([1, 3, 2]), _inputs(_t(6, 3))),
    "chunk": (lambda x: x.mul(2).chunk(3), _inputs(_t(7, 2))),
    "tensor_split_sections": (lambda x: x.mul(2).tensor_split(3), _inputs(_t(7, 2))),
    "tensor_split_indices": (lambda x: x.mul(2).tensor_split([1, 4], dim=1), _inputs(_t(2, 6))),
    "hsplit": (lambda x: x.mul(2).hsplit(2), _inputs(_t(3, 4))),
    "vsplit": (lambda x: x.mul(2).vsplit([1, 2]), _inputs(_t(4, 3))),
    "subset": (lambda x: x.mul(2).unbind(0)[1:3], _inputs(_t(5, 3))),
    "reordered": (lambda x: tuple(reversed(x.mul(2).chunk(4))), _inputs(_t(8, 3))),
    "views_of_results": (
        lambda x: (lambda a, b, c: (a.view(-1), b.t(), c.unsqueeze(0)))(*x.mul(2).split(2)),
        _inputs(_t(6, 3)),
    ),
    "intermediate_with_its_views": (lambda x: (lambda y: (y, *y.unbind(0)))(x.mul(2)), _inputs(_t(3, 4))),
    "views_of_input": (lambda x: x.unbind(0), _inputs(_t(3, 4))),
    "view_of_view_input": (lambda x: x.unbind(1), lambda: [_leaf(4, 6).mul(1)[1:3]]),
    "non_view_outputs_mixed": (lambda x: (lambda y: (y.sum(), *y.unbind(0), x.cos()))(x.mul(2)), _inputs(_t(3, 4))),
    "dict_outputs": (lambda x: dict(zip("abc", x.mul(2).chunk(3))), _inputs(_t(6, 2))),
    "list_outputs": (lambda x: [list(x.mul(2).split(1)), x.sum()], _inputs(_t(3, 2))),
    "no_grad_inputs": (lambda x: x.mul(2).unbind(0), lambda: [_leaf(3, 4, requires_grad=False)]),
    "mixed_requires_grad": (lambda x, w: (x * w).unbind(0), lambda: [_leaf(3, 4), _leaf(4, requires_grad=False)]),
    "complex_view_as_real": (
        lambda x: torch.view_as_real(x.mul(2)).unbind(-1),
        lambda: [torch.randn(3, 4, dtype=torch.complex64, generator=torch.Generator().manual_seed(1)).requires_grad_()],
    ),
    "mutation_of_intermediate_before_views": (
        lambda x: (lambda y: (y.add_(1), y.unbind(0))[1])(x.mul(2)),
        _inputs(_t(3, 4)),
    ),
    "mutation_through_a_view_before_views": (
        lambda x: (lambda y: (y[0].mul_(3), y.chunk(3))[1])(x.mul(2)),
        _inputs(_t(3, 4)),
    ),
    "input_mutated_then_viewed": (
        lambda x: (x.add_(1), x.unbind(0))[1],
        lambda: [_leaf(3, 4, requires_grad=False)],
    ),
    "nonleaf_input_mutated_then_viewed": (
        lambda x: (x.mul_(2), x.unbind(0))[1],
        lambda: [_leaf(3, 4).mul(1)],
    ),
    "mutation_after_views_are_taken": (
        lambda x: (lambda y: (lambda outs: (y.add_(1), outs)[1])(y.unbind(0)))(x.mul(2)),
        _inputs(_t(3, 4)),
    ),
    "mutation_of_a_view_output": (
        lambda x: (lambda v: (v.mul_(2), v)[1])(x.mul(2).view(-1)),
        _inputs(_t(3, 4)),
    ),
    "diagonal_and_as_strided": (
        lambda x: (lambda y: (y.diagonal(), y.as_strided((2, 2), (1, 1))))(x.mul(2)),
        _inputs(_t(3, 3)),
    ),
    "expand_then_unbind": (lambda x: x.mul(2).expand(3, 4).unbind(0), _inputs(_t(4))),
    "views_under_no_grad_inside_the_graph": (_views_under_no_grad, _inputs(_t(3, 2))),
    "metadata_mutation_of_base_before_views": (_t_then_unbind, _inputs(_t(3, 4))),
    "aliased_inputs_mutated_before_views": (_mutate_a_view_b, _two_views_of_one_base),
    "mutation_after_views_read_by_compute": (_unbind_add_sum, _inputs(_t(3, 4))),
    "input_mutation_after_views_read_by_compute": (_unbind_add_sum, lambda: [_leaf(3, 4, requires_grad=False)]),
    "aliased_inputs_mutated_after_views": (_view_b_mutate_a, _two_views_of_one_base),
    "metadata_mutation_of_a_view_read_by_compute": (_transpose_view_and_sum, _inputs(_t(3, 4))),
    "metadata_mutation_after_views": (_unbind_then_t, _inputs(_t(3, 4))),
    "input_metadata_mutation_feeding_views": (lambda x: (x.t_(), x.unbind(0))[1], lambda: [_leaf(3, 4).mul(1)]),
    "input_metadata_mutation_in_the_core": (_t_input_then_compute, lambda: [_leaf(3, 4).mul(1)]),
    "metadata_mutation_read_by_compute_and_views": (_unsqueeze_sum_unbind, _inputs(_t(3, 4))),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_matches_eager(name: str) -> None:
    fn, make_inputs = PROGRAMS[name]
    assert_matches_eager(fn, backend_aot_eager(fn), make_inputs)


@pytest.mark.parametrize(
    "name",
    [
        "split",
        "view_of_view_input",
        "dict_outputs",
        "mutation_after_views_are_taken",
        # Not input_metadata_mutation_*: compile_function runs those eagerly, as Dynamo breaks the graph there
        # (tests/test_bad_input.py, FALLBACK_PROGRAMS["transpose_input"]).
    ],
)
def test_program_matches_eager_without_dynamo(name: str) -> None:
    fn, make_inputs = PROGRAMS[name]
    assert_matches_eager(fn, function_aot_eager(fn), make_inputs)


@pytest.mark.parametrize("name", ["input_mutated_then_viewed", "mutation_after_views_are_taken", "split"])
def test_program_matches_eager_with_inductor_inside(name: str) -> None:
    fn, make_inputs = PROGRAMS[name]
    assert_matches_eager(fn, torch.compile(fn, backend=pv.backend("inductor", strict=True)), make_inputs)


def test_no_as_strided_for_a_view_input() -> None:
    """pytorch #95103: an input that is itself a view must not come back through as_strided."""
    base = _leaf(4, 6)
    x = base.mul(1)[1:3]
    outs = backend_aot_eager(lambda x: x.unbind(1))(x)
    assert view_nodes(flat_tensors(outs)) == {"UnbindBackward0": 1, "SliceBackward0": 1}
    assert all(o._base is x._base for o in outs)


def test_split_epilogue_is_one_node() -> None:
    x = _leaf(64, 4)
    outs = backend_aot_eager(lambda x: x.mul(2).split(1))(x)
    assert view_nodes(list(outs)) == {"SplitBackward0": 1}


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (lambda x: (lambda y: (lambda a, o: (y.add_(1), (o, a.sum()))[1])(y[0], y.unbind(0)))(x.mul(2)), "alias taken"),
        (lambda x: (lambda y: (lambda o: (y[0].add_(1), (o, y.sum()))[1])(y.unbind(0)))(x.mul(2)), "through a view"),
    ],
    ids=["stale_alias", "mutation_through_a_view"],
)
def test_ordering_cases_are_cut_in_segments(fn: Callable[..., Any], reason: str, monkeypatch) -> None:
    # Without cuts each falls back for its ordering reason; cut in two (Note [Segments]) each runs, strict.
    x = _leaf(3, 3, requires_grad=False)
    actual = pv.compile_function(fn, strict=True)(x.clone())
    torch.testing.assert_close(actual, fn(x.clone()))
    monkeypatch.setattr(pv.pipeline, "MAX_CUT_DEPTH", 0)
    with pytest.raises(pv.StrictModeError, match=reason):
        pv.compile_function(fn, strict=True)(_leaf(3, 3, requires_grad=False))


def test_compile_function_retraces_on_metadata_change() -> None:
    compiled = function_aot_eager(seed)
    compiled(_leaf(3, 4))
    compiled(_leaf(3, 4))
    assert len(compiled.cache) == 1
    compiled(_leaf(5, 4))
    compiled(_leaf(3, 4, requires_grad=False))
    compiled(_leaf(4, 3).t())
    assert len(compiled.cache) == 4


def test_the_comparison_detects_the_unsafe_fix() -> None:
    """The harness must be able to fail: stock hides the aliasing of the seed program's outputs."""
    with pytest.raises(AssertionError, match="aliases"):
        assert_matches_eager(seed, torch.compile(seed, backend="aot_eager"), _seed_inputs)
