"""The case library: programs over the aliasing space of multi-output views, each with a seeded input factory.

A case is a program ``fn(*args)`` and a factory that builds fresh inputs for every call (the probes mutate
outputs, and through them inputs). Programs that are wrong in eager are valid cases: the expected behaviour of
a compiled strategy is then eager's error. ``fast`` marks the subset CI runs; ``slow`` the stress cases only
``--slow`` runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .case_types import Case, InputFactory, Inputs, T, registrar, t, tensors
from .cases_upstream import UPSTREAM_CASES

__all__ = ["CASES", "Case", "InputFactory", "Inputs", "T", "by_name", "case", "select_cases", "t", "tensors"]

# The library's own cases, in order; the ported upstream cases are appended at the end of this module.
CASES: list[Case] = []
case = registrar(CASES)


# ---------------------------------------------------------------------------------------------------------
# Every multi-output view op, all results returned, subsets, reordered.
# ---------------------------------------------------------------------------------------------------------


@case(tensors(t(3, 4)), fast=True, note="the seed program of #111411")
def unbind_dim0(x: torch.Tensor) -> Any:
    return x.mul(2).unbind(0)


@case(tensors(t(3, 4)))
def unbind_dim1(x: torch.Tensor) -> Any:
    return x.mul(2).unbind(1)


@case(tensors(t(2, 3, 4)))
def unbind_negative_dim(x: torch.Tensor) -> Any:
    return x.sin().unbind(-1)


@case(tensors(t(4, 5)))
def unbind_subset(x: torch.Tensor) -> Any:
    outs = x.mul(2).unbind(0)
    return outs[0], outs[2]


@case(tensors(t(3, 5)), fast=True)
def unbind_reordered(x: torch.Tensor) -> Any:
    a, b, c = x.mul(2).unbind(0)
    return c, a, b


@case(tensors(t(3, 4)), note="the same view returned twice")
def unbind_duplicate_output(x: torch.Tensor) -> Any:
    outs = x.mul(2).unbind(0)
    return outs[1], outs[1], outs[0]


@case(tensors(t(6, 4)))
def split_int(x: torch.Tensor) -> Any:
    return x.mul(2).split(2)


@case(tensors(t(6, 4)))
def split_uneven(x: torch.Tensor) -> Any:
    return x.mul(2).split(4)


@case(tensors(t(4, 6)))
def split_dim1(x: torch.Tensor) -> Any:
    return x.mul(2).split(2, dim=1)


@case(tensors(t(4, 6)), fast=True)
def split_with_sizes(x: torch.Tensor) -> Any:
    return x.mul(2).split_with_sizes([1, 2, 3], dim=1)


@case(tensors(t(5, 3)))
def torch_split_list(x: torch.Tensor) -> Any:
    return torch.split(x.exp(), [2, 3])


@case(tensors(t(6, 4)))
def chunk(x: torch.Tensor) -> Any:
    return x.mul(2).chunk(3)


@case(tensors(t(4, 6)), note="chunk(4) of 6 gives 3 chunks")
def chunk_fewer_than_asked(x: torch.Tensor) -> Any:
    return x.mul(2).chunk(4, dim=1)


@case(tensors(t(4, 6)))
def tensor_split_sections(x: torch.Tensor) -> Any:
    return x.mul(2).tensor_split(4, dim=1)


@case(tensors(t(4, 6)))
def tensor_split_indices(x: torch.Tensor) -> Any:
    return x.mul(2).tensor_split([1, 4], dim=1)


@case(tensors(t(4, 6)))
def hsplit(x: torch.Tensor) -> Any:
    return x.mul(2).hsplit(3)


@case(tensors(t(4, 6)))
def vsplit_indices(x: torch.Tensor) -> Any:
    return x.mul(2).vsplit([1, 3])


@case(tensors(t(2, 3, 4)))
def dsplit(x: torch.Tensor) -> Any:
    return x.mul(2).dsplit(2)


@case(tensors(t(6, 4)))
def split_reversed_subset(x: torch.Tensor) -> Any:
    return x.mul(2).split(2)[::-2]


@case(tensors(t(3, 4)), note="split larger than the dim: one result")
def split_single_result(x: torch.Tensor) -> Any:
    return x.mul(2).split(10)


@case(tensors(t(6, 4)), note="unsafe_chunk: results autograd does not track as views")
def unsafe_chunk(x: torch.Tensor) -> Any:
    return x.mul(2).unsafe_chunk(3)


@case(tensors(t(4, 6)))
def unbind_noncontiguous(x: torch.Tensor) -> Any:
    return x.mul(2).view(2, 2, 6).unbind(1)


# ---------------------------------------------------------------------------------------------------------
# Views of inputs and of inputs that are views of other tensors (pytorch #95103).
# ---------------------------------------------------------------------------------------------------------


@case(tensors(t(3, 4)), fast=True, note="views of a leaf that requires grad")
def input_unbind(x: torch.Tensor) -> Any:
    return x.unbind(0)


@case(tensors(t(4, 4, rg=False)))
def input_chunk_no_grad(x: torch.Tensor) -> Any:
    return x.chunk(2)


@case(tensors(t(3, 4, rg=False), t(3, 4)))
def input_returned_with_views(x: torch.Tensor, w: torch.Tensor) -> Any:
    return x, x.unbind(0), (w * x).unbind(1)


def _view_input(view: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...], leaf_rg: bool = True):
    """A factory whose argument is a view of a leaf (the leaf is what gets a .grad)."""

    def factory(gen: torch.Generator, device: str) -> Inputs:
        base = T(shape, leaf_rg).build(gen, device)
        source = base.mul(1) if leaf_rg else base  # a non-leaf base lets the program mutate the view
        return Inputs((view(source),), (base,) if leaf_rg else (), (source,))

    return factory


@case(_view_input(lambda b: b[1:], (4, 5)), fast=True, note="#95103: input is a slice of another tensor")
def view_input_unbind(x: torch.Tensor) -> Any:
    return x.unbind(0)


@case(_view_input(lambda b: b.t(), (4, 6)))
def view_input_transposed_split(x: torch.Tensor) -> Any:
    return x.split(2)


@case(_view_input(lambda b: b[:, 1:], (3, 5), leaf_rg=False))
def view_input_mutated_then_unbound(x: torch.Tensor) -> Any:
    x.add_(1)
    return x.unbind(0)


@case(_view_input(lambda b: b[1:], (4, 5)))
def view_input_mul_chunk(x: torch.Tensor) -> Any:
    return x.mul(3).chunk(2, dim=1)


def _two_views_of_one_base(gen: torch.Generator, device: str) -> Inputs:
    base = T((2, 3, 4), True).build(gen, device)
    source = base.mul(1)
    return Inputs((source[0], source[1]), (base,), (source,))


@case(_two_views_of_one_base, fast=True, note="inputs alias each other and one is mutated")
def aliased_inputs_mutated(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.mul_(2)
    return b.unbind(0), a.unbind(1)


@case(_two_views_of_one_base)
def aliased_inputs_read_only(a: torch.Tensor, b: torch.Tensor) -> Any:
    return (a + b).unbind(0), b.unbind(1)


# ---------------------------------------------------------------------------------------------------------
# Chains of views, intermediates returned with their views, several views of one base, overlap.
# ---------------------------------------------------------------------------------------------------------


@case(tensors(t(4, 6)))
def chain_before(x: torch.Tensor) -> Any:
    return x.mul(2).t()[1:].unbind(0)


@case(tensors(t(3, 6)), fast=True)
def chain_after(x: torch.Tensor) -> Any:
    return [o.view(2, 3) for o in x.mul(2).unbind(0)]


@case(tensors(t(4, 6)))
def chain_before_and_after(x: torch.Tensor) -> Any:
    return tuple(o.unsqueeze(0)[:, 1:] for o in x.mul(2).transpose(0, 1)[1:].chunk(2))


@case(tensors(t(2, 3, 4)))
def unflatten_then_unbind(x: torch.Tensor) -> Any:
    return x.mul(2).flatten(1).unflatten(1, (3, 4)).movedim(2, 0).unbind(0)


@case(tensors(t(3, 4)), fast=True)
def intermediate_with_views(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return y, y.unbind(0)


@case(tensors(t(3, 4)))
def intermediate_after_its_views(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return y.unbind(0), y


@case(tensors(t(3, 4)))
def plain_views_and_unbind(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return y.view(-1), y.t(), y.unbind(0), y[0]


@case(tensors(t(3, 4)))
def two_multi_output_views_of_one_base(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return y.unbind(0), y.split(2, dim=1)


@case(tensors(t(4, 6)))
def multi_output_view_of_a_result(x: torch.Tensor) -> Any:
    return x.mul(2).unbind(0)[1].split(2)


@case(tensors(t(3, 4)))
def select_views_not_unbind(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return [y[i] for i in range(3)]


@case(tensors(t(3, 6)))
def narrow_views(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return [y.narrow(1, i, 2) for i in range(3)]


@case(tensors(t(6)), fast=True, note="expand then unbind: results overlap in memory")
def expand_then_unbind(x: torch.Tensor) -> Any:
    return x.mul(2).expand(3, 6).unbind(0)


@case(tensors(t(4, 4)))
def diagonal_and_unbind(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return y.diagonal(), y.unbind(1)


@case(tensors(t(4, 4)))
def user_as_strided(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return y.as_strided((2, 2), (1, 4)), y.as_strided((3, 3), (1, 1)).unbind(0)


@case(tensors(t(8)))
def unfold_windows_unbind(x: torch.Tensor) -> Any:
    return x.mul(2).unfold(0, 3, 2).unbind(0)


@case(tensors(t(2, 3, 4)))
def squeeze_each_split(x: torch.Tensor) -> Any:
    return [s.squeeze(0) for s in x.mul(2).split(1)]


@case(tensors(t(3, 4)), note="no aliased output: a control")
def cat_of_split(x: torch.Tensor) -> Any:
    return torch.cat(x.mul(2).split(2, dim=1), dim=0)


@case(tensors(t(3, 4)))
def stack_some_return_rest(x: torch.Tensor) -> Any:
    a, b, c = x.mul(2).unbind(0)
    return torch.stack([a, b]), c


@case(tensors(t(3, 4)), note="a reduction plus the views")
def sum_and_unbind(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return y.sum(), y.unbind(0)


@case(tensors(t(3, 4), t(4, 2)))
def two_bases(x: torch.Tensor, w: torch.Tensor) -> Any:
    return x.sin().unbind(0), (x @ w).chunk(2, dim=1)


# ---------------------------------------------------------------------------------------------------------
# Data mutations: before the views are taken, after (eager errors lazily on grad_fn), through a view.
# ---------------------------------------------------------------------------------------------------------


@case(tensors(t(3, 4)))
def mutate_intermediate_before(x: torch.Tensor) -> Any:
    y = x.mul(2)
    y.add_(1)
    return y.unbind(0)


@case(tensors(t(3, 4)), fast=True, note="eager: lazy error on the results' grad_fn")
def mutate_intermediate_after(x: torch.Tensor) -> Any:
    y = x.mul(2)
    outs = y.unbind(0)
    y.add_(1)
    return outs


@case(tensors(t(3, 4)))
def mutate_intermediate_after_split(x: torch.Tensor) -> Any:
    y = x.exp()
    outs = y.split(2, dim=1)
    y.mul_(2)
    return outs[1], outs[0]


@case(tensors(t(3, 4, rg=False), t(3, 4)))
def mutate_input_before(x: torch.Tensor, w: torch.Tensor) -> Any:
    x.add_(1)
    return x.unbind(0), (x * w).unbind(1)


@case(tensors(t(3, 4, rg=False)), fast=True)
def mutate_input_after(x: torch.Tensor) -> Any:
    outs = x.unbind(0)
    x.mul_(2)
    return outs


@case(tensors(t(3, 4)))
def mutate_through_select_before(x: torch.Tensor) -> Any:
    y = x.mul(2)
    y[0].add_(1)
    return y.unbind(0)


@case(tensors(t(3, 4)), note="eager raises in the program: in-place on an unbind result")
def mutate_result_in_program(x: torch.Tensor) -> Any:
    outs = x.mul(2).unbind(0)
    outs[0].add_(1)
    return outs


@case(tensors(t(3, 4, rg=False)), note="allowed in eager: nothing requires grad")
def mutate_result_in_program_no_grad(x: torch.Tensor) -> Any:
    outs = x.clone().unbind(0)
    outs[0].add_(1)
    return outs


@case(tensors(t(3, 4)))
def mutate_view_then_return_it(x: torch.Tensor) -> Any:
    y = x.mul(2)
    out = y.view(-1)
    out.mul_(2)
    return out, y.unbind(0)


@case(tensors(t(3, 4)))
def unbind_under_no_grad(x: torch.Tensor) -> Any:
    y = x.mul(2)
    with torch.no_grad():
        outs = y.unbind(0)
    return outs


# ---------------------------------------------------------------------------------------------------------
# Metadata mutations.
# ---------------------------------------------------------------------------------------------------------


@case(tensors(t(3, 4)), fast=True)
def t_then_unbind(x: torch.Tensor) -> Any:
    y = x.mul(2)
    y.t_()
    return y.unbind(0)


@case(tensors(t(4, 6)))
def transpose_then_split(x: torch.Tensor) -> Any:
    y = x.mul(2)
    y.transpose_(0, 1)
    return y.split(2)


@case(tensors(t(3, 1, 4)))
def squeeze_then_unbind(x: torch.Tensor) -> Any:
    y = x.mul(2)
    y.squeeze_(1)
    return y.unbind(0)


@case(tensors(t(3, 4, rg=False)))
def input_t_then_unbind(x: torch.Tensor) -> Any:
    x.t_()
    return x.unbind(0)


@case(tensors(t(3, 4, rg=False)), note="resize_ changes the storage")
def resize_then_unbind(x: torch.Tensor) -> Any:
    y = x.clone()
    y.resize_(2, 6)
    return y.unbind(0)


@case(tensors(t(3, 4)))
def unsqueeze_a_result(x: torch.Tensor) -> Any:
    outs = x.mul(2).unbind(0)
    outs[0].unsqueeze_(0)
    return outs


# ---------------------------------------------------------------------------------------------------------
# requires_grad, detach/alias, dtypes, 0-dim and empty tensors.
# ---------------------------------------------------------------------------------------------------------


@case(tensors(t(3, 4, rg=False)), fast=True)
def no_grad_input(x: torch.Tensor) -> Any:
    return x.mul(2).unbind(0)


@case(tensors(t(3, 4, rg=False), t(3, 4)))
def mixed_requires_grad(x: torch.Tensor, w: torch.Tensor) -> Any:
    return x.mul(2).unbind(0), (x * w).split(1)


@case(tensors(t(3, 4)))
def detach_then_unbind(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return y, y.detach().unbind(0)


@case(tensors(t(3, 4)))
def unbind_then_detach(x: torch.Tensor) -> Any:
    return [o.detach() for o in x.mul(2).unbind(0)]


@case(tensors(t(3, 4)))
def alias_then_unbind(x: torch.Tensor) -> Any:
    y = x.mul(2)
    return y.view_as(y).unbind(0), torch.ops.aten.alias(y)


@case(tensors(t(3, 4, dtype=torch.complex64)), fast=True)
def complex_view_as_real_unbind(z: torch.Tensor) -> Any:
    return torch.view_as_real(z.mul(2)).unbind(-1)


@case(tensors(t(3, 4, 2)))
def view_as_complex_unbind(x: torch.Tensor) -> Any:
    return torch.view_as_complex(x.mul(2)).unbind(0)


@case(tensors(t(3, 4, dtype=torch.complex64)))
def complex_real_imag(z: torch.Tensor) -> Any:
    y = z.mul(2)
    return y.real.unbind(0), y.imag


@case(tensors(t(3, 4, rg=False, dtype=torch.int64)))
def integer_unbind(x: torch.Tensor) -> Any:
    return x.mul(2).unbind(0)


@case(tensors(t(4, 6, rg=False, dtype=torch.int32)))
def integer_chunk_mutated(x: torch.Tensor) -> Any:
    y = x.add(1)
    outs = y.chunk(2, dim=1)
    y.mul_(3)
    return outs


@case(tensors(t(3, 4)))
def dtype_view_unbind(x: torch.Tensor) -> Any:
    return x.mul(2).view(torch.int32).unbind(0)


@case(tensors(t(5)))
def unbind_to_zero_dim(x: torch.Tensor) -> Any:
    return x.mul(2).unbind(0)


@case(tensors(t()))
def zero_dim_input(x: torch.Tensor) -> Any:
    return x.mul(2).unsqueeze(0).expand(3).unbind(0)


@case(tensors(t(3, 0)))
def empty_results(x: torch.Tensor) -> Any:
    return x.mul(2).unbind(0)


@case(tensors(t(0, 4)))
def unbind_empty_dim(x: torch.Tensor) -> Any:
    return x.mul(2).unbind(0), x.sum()


@case(tensors(t(0, 4)))
def split_empty(x: torch.Tensor) -> Any:
    return x.mul(2).split(2)


# ---------------------------------------------------------------------------------------------------------
# Containers, modules, many results.
# ---------------------------------------------------------------------------------------------------------


@case(tensors(t(3, 4)))
def dict_outputs(x: torch.Tensor) -> Any:
    a, b, c = x.mul(2).unbind(0)
    return {"a": a, "c": c, "b": b}


@case(tensors(t(3, 4)), fast=True)
def nested_outputs(x: torch.Tensor) -> Any:
    a, b, c = x.mul(2).unbind(0)
    return [a, (b, {"c": c, "n": 3})]


class QKV(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, 3 * dim)

    def forward(self, x: torch.Tensor) -> Any:
        q, k, v = self.proj(x).chunk(3, dim=-1)
        return q, k, v


class KeyedEmbedding(nn.Module):
    """Pooled lookups of several tables in one batch, split back per key (a KeyedTensor to dict)."""

    def __init__(self, dims: tuple[int, ...] = (4, 8, 2)) -> None:
        super().__init__()
        self.keys = ("user", "item", "ctx")
        self.dims = list(dims)
        self.tables = nn.ModuleList(nn.EmbeddingBag(20, d, mode="sum") for d in dims)

    def forward(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        pooled = torch.cat([table(ids[:, i]) for i, table in enumerate(self.tables)], dim=1)
        return dict(zip(self.keys, pooled.split_with_sizes(self.dims, dim=1)))


@functools.cache
def _module(cls: type[nn.Module], device: str) -> nn.Module:
    # One module per device, seeded, shared by every strategy: the harness resets its .grad before each call.
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return cls().to(device)


def _module_case(
    cls: type[nn.Module], inputs: Callable[[torch.Generator, str], torch.Tensor], name: str, **kw: Any
) -> None:
    def factory(gen: torch.Generator, device: str) -> Inputs:
        x = inputs(gen, device)
        params = tuple(_module(cls, device).parameters())
        return Inputs((x,), params + ((x,) if x.requires_grad else ()))

    module = functools.partial(_module, cls)
    CASES.append(Case(name, module("cpu"), factory, module=module, **kw))


_module_case(
    QKV,
    lambda gen, device: T((2, 5, 8)).build(gen, device),
    name="module_linear_chunk_qkv",
    fast=True,
    note="nn.Linear then chunk into q, k, v",
)
_module_case(
    KeyedEmbedding,
    lambda gen, device: torch.randint(0, 20, (6, 3, 2), generator=gen).to(device),
    name="module_keyed_embedding_dict",
    note="split_with_sizes of a keyed embedding batch into a dict",
)


@case(tensors(t(256, 4)), note="256 results")
def many_results_unbind(x: torch.Tensor) -> Any:
    return x.mul(2).unbind(0)


@case(tensors(t(300, 2)), note="300 results, every other one returned, reversed")
def many_results_split_subset(x: torch.Tensor) -> Any:
    return x.mul(2).split(1)[::-2]


@case(tensors(t(1024, 2)), slow=True, note="1024 results")
def many_results_stress(x: torch.Tensor) -> Any:
    return x.mul(2).unbind(0)


def select_cases(*, fast_only: bool = False, slow: bool = False, pattern: str | None = None) -> list[Case]:
    """The cases a run asks for: ``pattern`` is a substring of the name."""
    return [
        c
        for c in CASES
        if (not fast_only or c.fast) and (slow or not c.slow) and (pattern is None or pattern in c.name)
    ]


def by_name(name: str) -> Case:
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(name)


# PyTorch's own aliasing tests, ported (cases_upstream.py), after the library's.
CASES += UPSTREAM_CASES
