"""Comparing a compiled program with eager, the way a user observes it."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree

# Autograd nodes of view calls: the part of the graph the epilogue must reproduce exactly.
VIEW_BACKWARDS = {
    "UnbindBackward0",
    "SplitBackward0",
    "SplitWithSizesBackward0",
    "SelectBackward0",
    "SliceBackward0",
    "ViewBackward0",
    "TBackward0",
    "TransposeBackward0",
    "UnsqueezeBackward0",
    "SqueezeBackward0",
    "SqueezeBackward1",
    "PermuteBackward0",
    "ExpandBackward0",
    "DiagonalBackward0",
    "NarrowBackward0",
    "AsStridedBackward0",
    "ViewAsRealBackward0",
    "ViewAsComplexBackward0",
    "AliasBackward0",
}  # not UnsafeViewBackward0: _unsafe_view's result is no view (eager's reshape-by-copy, SDPA's math path end in it)


def flat_tensors(out: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def view_nodes(outs: list[torch.Tensor]) -> collections.Counter[str]:
    """Count view-call autograd nodes reachable from the outputs through view nodes only."""
    seen: set[Any] = set()
    counts: collections.Counter[str] = collections.Counter()
    stack = []
    for o in outs:
        try:
            stack.append(o.grad_fn)
        except RuntimeError:  # eager raises lazily on grad_fn of a view whose base was mutated
            counts["<grad_fn raises>"] += 1
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        name = type(fn).__name__
        if name in VIEW_BACKWARDS:
            counts[name] += 1
            stack.extend(f for f, _ in fn.next_functions)
    return counts


def alias_structure(inputs: list[torch.Tensor], outs: list[torch.Tensor]) -> list[tuple[Any, ...]]:
    """Per output: is it a view, and of what (an input, an output, or the k-th unnamed shared base)."""
    shared: dict[int, int] = {}
    desc = []
    for o in outs:
        base = o._base
        if base is None:
            what: Any = None
        elif any(base is i for i in inputs):
            what = ("input", next(k for k, i in enumerate(inputs) if base is i))
        elif any(base is i._base for i in inputs if i._base is not None):
            what = ("base of input", next(k for k, i in enumerate(inputs) if base is i._base))
        elif any(base is p for p in outs):
            what = ("output", next(k for k, p in enumerate(outs) if base is p))
        else:
            what = ("shared", shared.setdefault(id(base), len(shared)))
        props = outcome(lambda o=o: (o.requires_grad, o.is_leaf, _grad_fn_kind(o)))
        desc.append((o._is_view(), what, props))
    return desc


def _grad_fn_kind(t: torch.Tensor) -> Any:
    # Compute nodes legitimately become CompiledFunctionBackward; view nodes must be eager's own.
    if t._is_view():
        return type(t.grad_fn).__name__
    return t.grad_fn is not None


def outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", fn())
    except Exception as e:
        return ("raised", type(e).__name__, str(e))


def assert_same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), (a, b)
        torch.testing.assert_close(a, b, equal_nan=True)
        return
    if isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            assert_same(x, y)
        return
    assert a == b, (a, b)


def observe(fn: Callable[..., Any], make_inputs: Callable[[], list[Any]]) -> dict[str, Any]:
    """Everything the tests compare, each probe on fresh inputs and fresh outputs."""
    obs: dict[str, Any] = {}

    inputs = make_inputs()
    tensors = flat_tensors(inputs)
    out = fn(*inputs)
    outs = flat_tensors(out)
    obs["structure"] = pytree.tree_structure(out)
    obs["values"] = [o.detach().clone() for o in outs]
    obs["aliases"] = alias_structure(tensors, outs)
    obs["view_nodes"] = view_nodes(outs)

    def backward() -> list[Any]:
        inputs = make_inputs()
        tensors = flat_tensors(inputs)
        outs = [o for o in flat_tensors(fn(*inputs)) if o.requires_grad]
        gen = torch.Generator().manual_seed(0)
        cots = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
        if outs:
            torch.autograd.backward(outs, cots)
        return [t.grad for t in tensors if t.is_leaf and t.requires_grad]

    obs["grads"] = outcome(backward)

    def mutate_output() -> list[Any]:
        inputs = make_inputs()
        outs = flat_tensors(fn(*inputs))
        outs[0].mul_(2)
        return [o.detach().clone() for o in outs]

    obs["mutate_output"] = outcome(mutate_output)

    def mutate_view_of_output() -> list[Any]:
        inputs = make_inputs()
        outs = flat_tensors(fn(*inputs))
        outs[-1].view(outs[-1].shape).add_(1)
        return [o.detach().clone() for o in outs]

    obs["mutate_view_of_output"] = outcome(mutate_view_of_output)

    def detach_mutate_backward() -> list[Any]:
        inputs = make_inputs()
        tensors = flat_tensors(inputs)
        outs = flat_tensors(fn(*inputs))
        outs[0].detach().zero_()
        grads = [o for o in outs if o.requires_grad]
        if grads:
            sum(o.sum() for o in grads).backward()
        return [t.grad for t in tensors if t.is_leaf and t.requires_grad]

    obs["detach_mutate_backward"] = outcome(detach_mutate_backward)
    return obs


def assert_matches_eager(
    fn: Callable[..., Any], compiled: Callable[..., Any], make_inputs: Callable[[], list[Any]]
) -> None:
    expected = observe(fn, make_inputs)
    actual = observe(compiled, make_inputs)
    assert actual["structure"] == expected["structure"]
    for key in expected:
        if key == "structure":
            continue
        try:
            assert_same(actual[key], expected[key])
        except AssertionError as e:
            raise AssertionError(f"{key}: compiled {actual[key]!r} vs eager {expected[key]!r}") from e


def strict_compiled(fn: Callable[..., Any], entry: str) -> Callable[..., Any]:
    """``fn`` under the prototype's ``entry`` ("backend" or "compile_function", aot_eager inside, raising instead
    of falling back), with Dynamo's caches and the fallback record cleared first."""
    import predispatch_views as pv

    torch._dynamo.reset()
    pv.FALLBACKS.clear()
    if entry == "backend":
        return torch.compile(fn, backend=pv.backend("aot_eager", strict=True))
    return pv.compile_function(fn, inner="aot_eager", strict=True)
