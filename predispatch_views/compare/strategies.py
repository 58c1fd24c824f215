"""How each strategy under comparison is produced.

- ``eager``: the reference.
- ``stock``: ``torch.compile(fn, backend=inner)``: torch 2.13 with the unsafe fix of pytorch PR #111411
  (multi-output view outputs are returned as non-views; their grad_fn is CompiledFunctionBackward).
- ``stock_no_fix``: stock with that optimization switched off: collect_metadata_analysis is told no output is a
  multi-output view, so AOTAutograd regenerates every aliased output on its own, by view replay
  (one UnbindBackward0 *per output*).
- ``legacy_as_strided``: also regenerate aliased outputs with as_strided instead of view replay
  (``_torch_internals.as_strided_output_regeneration``): one AsStridedBackward0 per output, the behaviour
  #111411 describes.
- ``slice_regen``: pytorch PR #194037's idea (closed, 2026-08), emulated outside torch: the unsafe fix off,
  and each aliased output of split/split_with_sizes/unbind regenerated as one select/narrow of its base, marked
  CreationMeta MULTI_OUTPUT_NODE (``_torch_internals.slice_output_regeneration``): one SelectBackward0 or
  SliceBackward0 per output, and eager's refusal of in-place writes (with Select/Slice in the message).
- ``prototype``: ``torch.compile(fn, backend=predispatch_views.backend(inner))``.
- ``prototype_fn``: ``predispatch_views.compile_function(fn, inner)``: the prototype without Dynamo (not in
  ``all_strategies``; the fuzzer uses it).
- ``stock_fn``: stock's counterpart of ``prototype_fn`` (aot_eager only): functorch's ``aot_function`` on the
  whole function, no Dynamo, compiled as the ``aot_eager`` backend compiles (``_torch_internals.stock_aot_function``).
  The fuzzer runs it only to classify a ``prototype_fn`` failure (Note [Fuzz rules]), never as a control.
- ``dynamo_eager``: the ceiling (issue 22): ``torch.compile(fn, backend="eager")``, Dynamo alone, nothing below it
  traced or compiled: the most fidelity a design below Dynamo can reach. Its "inner" is Dynamo's backend
  ``eager`` (label ``dynamo_eager[eager]``), one per table whatever the inners; in ``parity_strategies`` and the
  fuzzer, not in ``all_strategies`` (the benchmarks).

The patches only matter while Dynamo compiles (on the first call, or a recompile), but they are applied around
every call so that a recompile under a probe sees them too. Each strategy is checked by its autograd graph on
the seed program in tests/test_strategies.py.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .. import _torch_internals as ti
from ..backend import backend as prototype_backend
from ..compile_function import compile_function

INNERS = ("aot_eager", "inductor")
CEILING = "dynamo_eager"
CEILING_BACKEND = "eager"  # Dynamo's own backend that runs the captured graph as it is


@dataclass(frozen=True)
class Strategy:
    name: str
    inner: str | None  # None for eager
    make: Callable[[Callable[..., Any]], Callable[..., Any]]

    @property
    def label(self) -> str:
        return self.name if self.inner is None else f"{self.name}[{self.inner}]"


def _compiled(fn: Callable[..., Any], backend: Any, patch: Callable[[], Any] | None) -> Callable[..., Any]:
    compiled = torch.compile(fn, backend=backend, dynamic=False)
    if patch is None:
        return compiled

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with patch():
            return compiled(*args, **kwargs)

    return run


@contextlib.contextmanager
def _no_fix() -> Any:
    # The compile caches key artifacts by graph, not by these patches: without disabling them a patched
    # strategy would silently reuse stock's compiled artifact.
    with ti.compile_caches_disabled(), ti.multi_output_view_optimization_disabled():
        yield


@contextlib.contextmanager
def _legacy() -> Any:
    with (
        ti.compile_caches_disabled(),
        ti.multi_output_view_optimization_disabled(),
        ti.as_strided_output_regeneration(),
    ):
        yield


@contextlib.contextmanager
def _slice_regen() -> Any:
    with (
        ti.compile_caches_disabled(),
        ti.multi_output_view_optimization_disabled(),
        ti.slice_output_regeneration(),
    ):
        yield


def eager() -> Strategy:
    return Strategy("eager", None, lambda fn: fn)


def stock(inner: str) -> Strategy:
    return Strategy("stock", inner, lambda fn: _compiled(fn, inner, None))


def stock_no_fix(inner: str) -> Strategy:
    return Strategy("stock_no_fix", inner, lambda fn: _compiled(fn, inner, _no_fix))


def legacy_as_strided(inner: str) -> Strategy:
    return Strategy("legacy_as_strided", inner, lambda fn: _compiled(fn, inner, _legacy))


def slice_regen(inner: str) -> Strategy:
    return Strategy("slice_regen", inner, lambda fn: _compiled(fn, inner, _slice_regen))


def prototype(inner: str) -> Strategy:
    return Strategy("prototype", inner, lambda fn: _compiled(fn, prototype_backend(inner), None))


def prototype_fn(inner: str) -> Strategy:
    return Strategy("prototype_fn", inner, lambda fn: compile_function(fn, inner))


def _input_signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        (tuple(a.shape), a.stride(), a.dtype, a.requires_grad, a.is_leaf) if isinstance(a, torch.Tensor) else repr(a)
        for a in ti.tree_leaves(args)
    )


def _aot_function_per_signature(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``aot_function`` traced again on new input metadata, as compile_function is, keeping the output's structure
    (aot_function hands a tuple of outputs back as a list)."""
    compiled: dict[tuple[Any, ...], tuple[Callable[..., Any], list[Any]]] = {}

    def run(*args: Any) -> Any:
        key = _input_signature(args)
        if key not in compiled:
            spec: list[Any] = []

            def flat(*a: Any) -> list[Any]:
                leaves, found = ti.tree_flatten(fn(*a))
                spec[:] = [found]
                return leaves

            compiled[key] = (ti.stock_aot_function(flat), spec)
        call, spec = compiled[key]
        return ti.tree_unflatten(list(call(*args)), spec[0])

    return run


def stock_fn(inner: str) -> Strategy:
    if inner != "aot_eager":
        raise ValueError(f"stock_fn exists for the aot_eager inner only, not {inner!r}")
    return Strategy("stock_fn", inner, _aot_function_per_signature)


def dynamo_eager() -> Strategy:
    return Strategy(CEILING, CEILING_BACKEND, lambda fn: _compiled(fn, CEILING_BACKEND, None))


def is_ceiling(s: Strategy) -> bool:
    return s.name == CEILING


def all_strategies(inners: tuple[str, ...] = INNERS) -> list[Strategy]:
    out = [eager()]
    for inner in inners:
        out += [stock(inner), stock_no_fix(inner), legacy_as_strided(inner), slice_regen(inner), prototype(inner)]
    return out


def parity_strategies(inners: tuple[str, ...] = INNERS) -> list[Strategy]:
    """The parity table's strategies: every one above, compile_function beside the backend (issue 10), and the
    ceiling after eager (issue 22)."""
    out = all_strategies(inners)
    out.insert(1, dynamo_eager())
    for inner in inners:
        out.insert(next(i for i, s in enumerate(out) if s.label == f"prototype[{inner}]") + 1, prototype_fn(inner))
    return out


def by_label(label: str) -> Strategy:
    for s in parity_strategies():
        if s.label == label:
            return s
    raise KeyError(label)
