"""Private torch APIs of the stock variants the comparison emulates (compare/strategies.py): AOTAutograd's
regeneration of aliased outputs, patched to the as_strided path of 2023 or to pytorch PR #194037's slices."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch._functorch.config as functorch_config


@contextlib.contextmanager
def as_strided_output_regeneration() -> Iterator[None]:
    """Regenerate aliased outputs with as_strided, as AOTAutograd did before view replay (2023).

    Today's ``gen_alias_from_base`` replays the output's autograd view function even with
    ``view_replay_for_aliased_outputs=False``; the runtime wrappers bind it by name at compile time, so this
    swaps in a version that always takes its as_strided path (what #111411 describes: one AsStridedBackward0
    per output).
    """
    from torch._functorch._aot_autograd import runtime_wrappers

    original = runtime_wrappers.gen_alias_from_base

    def as_strided_alias(
        base: torch.Tensor, target: torch.Tensor, requires_grad: bool, *args: Any, **kwargs: Any
    ) -> torch.Tensor:
        if base.dtype != target.dtype or base.is_complex() != target.is_complex():
            return original(base, target, requires_grad, *args, **kwargs)
        out = base.as_strided(target.size(), target.stride(), target.storage_offset())
        if base.requires_grad and not requires_grad:
            out = out.detach()
        elif not base.requires_grad and requires_grad:
            out.requires_grad_(True)
        return out

    runtime_wrappers.gen_alias_from_base = as_strided_alias
    try:
        with functorch_config.patch(view_replay_for_aliased_outputs=False):
            yield
    finally:
        runtime_wrappers.gen_alias_from_base = original


# The multi-output view ViewMetas and how one output of each is one select/narrow of the base, read from
# ``as_tuple()``: (has_symbolic_inputs, out_index, is_multi_output, inverse_return_mode, *op arguments).
def _one_output(base: torch.Tensor, view_meta: Any) -> torch.Tensor | None:
    from torch._C import _functionalization as F

    if isinstance(view_meta, F.unbind_int_ViewMeta):
        _, index, _, _, dim = view_meta.as_tuple()
        return base.select(dim, index)
    if isinstance(view_meta, F.split_Tensor_ViewMeta):
        _, index, _, _, split_size, dim = view_meta.as_tuple()
        start = index * split_size
        return base.narrow(dim, start, min(split_size, base.size(dim) - start))
    if isinstance(view_meta, F.split_with_sizes_ViewMeta):
        _, index, _, _, sizes, dim = view_meta.as_tuple()
        return base.narrow(dim, sum(sizes[:index]), sizes[index])
    return None


def _is_multi_output(view_meta: Any) -> bool:
    from torch._C import _functionalization as F

    return isinstance(view_meta, (F.unbind_int_ViewMeta, F.split_Tensor_ViewMeta, F.split_with_sizes_ViewMeta))


def _mark_multi_output(view: torch.Tensor) -> None:
    """What autograd's refusal to mutate an output of a multi-output view keys on; like #194037, only DEFAULT is
    overwritten (a view made under no_grad or inference mode already has a more specific reason)."""
    meta = torch._C._autograd
    if view._is_view() and meta._get_creation_meta(view) == meta.CreationMeta.DEFAULT:
        meta._set_creation_meta(view, meta.CreationMeta.MULTI_OUTPUT_NODE)


def replay_with_slices(base: torch.Tensor, view_metas: Any) -> torch.Tensor:
    """Apply a ViewMeta sequence to ``base``, building each multi-output view step as one select/narrow."""
    from torch._C import _functionalization as F

    out = base
    for view_meta in view_metas:
        one = _one_output(out, view_meta)
        if one is None:
            out = F.apply_view_meta_sequence(out, [view_meta])
        else:
            _mark_multi_output(one)
            out = one
    return out


@contextlib.contextmanager
def slice_output_regeneration() -> Iterator[None]:
    """Regenerate each aliased output of split/split_with_sizes/unbind as one select/narrow of its base, marked
    CreationMeta MULTI_OUTPUT_NODE: pytorch PR #194037's idea (it changed functionalization's ViewMeta codegen)
    applied where AOTAutograd regenerates aliased outputs. Use with the unsafe fix off, so that such outputs
    are aliased outputs at all."""
    from torch._functorch._aot_autograd import runtime_wrappers

    original = runtime_wrappers.gen_alias_from_base

    def sliced_alias(
        base: torch.Tensor, target: torch.Tensor, requires_grad: bool, view_metas: Any = None, **kwargs: Any
    ) -> torch.Tensor:
        if (
            not kwargs.get("replay_views")
            or view_metas is None
            or any(vm.has_symbolic_inputs for vm in view_metas.sequence)
            or not any(_is_multi_output(vm) for vm in view_metas.sequence)
        ):
            return original(base, target, requires_grad, view_metas, **kwargs)
        out = replay_with_slices(base, view_metas.sequence)
        if out.shape != target.shape:
            raise AssertionError(f"slice regeneration gave shape {tuple(out.shape)}, expected {tuple(target.shape)}")
        if base.requires_grad and not requires_grad:
            out = out.detach()
        elif not base.requires_grad and requires_grad:
            out.requires_grad_(True)
        return out

    runtime_wrappers.gen_alias_from_base = sliced_alias
    try:
        with functorch_config.patch(view_replay_for_aliased_outputs=True):
            yield
    finally:
        runtime_wrappers.gen_alias_from_base = original
