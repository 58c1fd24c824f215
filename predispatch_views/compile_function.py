"""``compile_function``: compile a plain function without Dynamo (like functorch's aot_function).

Inputs and outputs may be any pytree of tensors and constants. A new trace is made whenever the input
metadata changes (structure, constants, shape, stride, dtype, device, requires_grad, grad mode, and which
inputs alias each other); shapes are static.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef

from .capture import capture_function
from .labels import LABEL_KEY, function_label
from .pipeline import CompiledProgram, InnerBackend, compile_captured


@dataclass
class _Entry:
    program: CompiledProgram
    out_spec: pytree.TreeSpec


def compile_function(
    fn: Callable[..., Any], inner: InnerBackend = "aot_eager", *, strict: bool = False
) -> Callable[..., Any]:
    cache: dict[Hashable, _Entry] = {}

    @functools.wraps(fn)
    def compiled(*args: Any, **kwargs: Any) -> Any:
        flat, in_spec = pytree.tree_flatten((args, kwargs))
        key = (in_spec, torch.is_grad_enabled(), _metadata_key(flat))
        entry = cache.get(key)
        if entry is None:
            entry = cache[key] = _compile(fn, flat, in_spec, inner, strict)
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        return pytree.tree_unflatten(list(entry.program.run(*tensors)), entry.out_spec)

    compiled.cache = cache  # type: ignore[attr-defined]
    return compiled


def _compile(
    fn: Callable[..., Any], flat: list[Any], in_spec: pytree.TreeSpec, inner: InnerBackend, strict: bool
) -> _Entry:
    tensor_positions = [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]
    out_spec: list[pytree.TreeSpec] = []

    def flat_fn(*tensors: torch.Tensor) -> list[Any]:
        values = list(flat)
        for i, t in zip(tensor_positions, tensors):
            values[i] = t
        args, kwargs = pytree.tree_unflatten(values, in_spec)
        outs, spec = pytree.tree_flatten(fn(*args, **kwargs))
        out_spec[:] = [spec]
        return outs

    tensors = [flat[i] for i in tensor_positions]
    graph, _ = capture_function(flat_fn, tensors)
    graph.meta[LABEL_KEY] = function_label(fn)
    program = compile_captured(graph, tensors, inner, strict=strict)
    return _Entry(program, out_spec[0])


def _metadata_key(flat: list[Any]) -> tuple[Hashable, ...]:
    storages: dict[StorageWeakRef, int] = {}
    key: list[Hashable] = []
    for a in flat:
        if isinstance(a, torch.Tensor):
            storage = storages.setdefault(StorageWeakRef(a.untyped_storage()), len(storages))
            key.append(
                (
                    tuple(a.shape),
                    a.stride(),
                    a.storage_offset(),
                    a.dtype,
                    a.device,
                    a.layout,
                    a.requires_grad,
                    a.is_leaf,
                    storage,
                )
            )
        else:
            key.append((type(a), a if isinstance(a, Hashable) else id(a)))
    return tuple(key)
