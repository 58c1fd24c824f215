"""Memory: nothing the runtime does retains bases, autograd graphs or inputs across calls.

Two measures, none timed:
- live tensors: the number of Python tensor objects gc knows of, before and after 1000 calls: it may go down
  (earlier tests' garbage being released) but a per-call leak would add at least 1000;
- storages: a weak reference to the storage of every call's input and output base (which the autograd graph
  saves for backward, so a retained graph retains it): all must be freed once the call's outputs are dropped.
Resident memory is printed for the report but not asserted on: glibc's allocator keeps freed pages (eager itself
grows by a GiB on some of these loops with large tensors, then plateaus), so it cannot tell a leak from a cache.
torch has no allocator statistics on CPU.
"""

from __future__ import annotations

import gc
import os
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

import predispatch_views as pv

CALLS = 1000
ROWS, COLS, HIDDEN = 8, 64, 16


def live_tensors() -> int:
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance on deprecated torch objects warns
        return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


def resident_mib() -> float | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return None


def unbind_of_intermediate(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (x @ w).relu().unbind(0)


def split_of_input(x: torch.Tensor, w: torch.Tensor) -> tuple[Any, ...]:
    # Outputs that view an input (no core node between them) next to a computed one.
    return (*x.split(3), (x * w[0]).sum())


def chunk_and_views(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a, b = (x @ w).tanh().chunk(2, dim=1)
    return a.t(), b[1:], a


PROGRAMS: dict[str, Callable[..., Any]] = {
    "unbind_of_intermediate": unbind_of_intermediate,
    "split_of_input": split_of_input,
    "chunk_and_views": chunk_and_views,
}


def _run_calls(compiled: Callable[..., Any], w: torch.Tensor, calls: int) -> list[StorageWeakRef]:
    """Call ``compiled`` ``calls`` times (backward every other call); weak refs to inputs and output bases."""
    refs: list[StorageWeakRef] = []
    for i in range(calls):
        x = torch.randn(ROWS, COLS)
        outs = compiled(x, w)
        refs.append(StorageWeakRef(x.untyped_storage()))
        bases = {id(o._base): o._base for o in outs if o._base is not None}
        refs += [StorageWeakRef(b.untyped_storage()) for b in bases.values()]
        if i % 2 == 0:
            sum(o.sum() for o in outs if o.requires_grad).backward()
        del outs, bases, x
    return refs


def _weight(name: str) -> torch.Tensor:
    return (
        torch.randn(1, COLS, requires_grad=True)
        if name == "split_of_input"
        else torch.randn(COLS, HIDDEN, requires_grad=True)
    )


@pytest.mark.parametrize(
    ("name", "inner"),
    [(n, "aot_eager") for n in sorted(PROGRAMS)] + [("chunk_and_views", "inductor")],
)
def test_thousand_calls_keep_memory_flat(name: str, inner: str) -> None:
    fn = PROGRAMS[name]
    compiled = torch.compile(fn, backend=pv.backend(inner, strict=True))
    w = _weight(name)
    _run_calls(compiled, w, 5)  # compile and warm up
    w.grad = None
    tensors_before, rss_before = live_tensors(), resident_mib()
    refs = _run_calls(compiled, w, CALLS)
    w.grad = None
    tensors_after, rss_after = live_tensors(), resident_mib()

    print(f"{name}[{inner}]: live tensors {tensors_before} -> {tensors_after}, rss {rss_before} -> {rss_after} MiB")
    assert tensors_after - tensors_before < CALLS // 20
    alive = [r for r in refs if not r.expired()]
    assert not alive, f"{len(alive)} of {len(refs)} input/base storages still alive after {CALLS} calls"


def test_the_outputs_are_views_so_the_base_check_means_something() -> None:
    compiled = torch.compile(unbind_of_intermediate, backend=pv.backend("aot_eager", strict=True))
    outs = compiled(torch.randn(4, COLS), _weight("unbind_of_intermediate"))
    assert all(o._base is outs[0]._base is not None for o in outs)


@pytest.mark.parametrize("requires_grad", [True, False])
def test_base_is_freed_when_the_outputs_die(requires_grad: bool) -> None:
    compiled = torch.compile(unbind_of_intermediate, backend=pv.backend("aot_eager", strict=True))
    w = torch.randn(COLS, 8, requires_grad=requires_grad)
    x = torch.randn(5, COLS)
    outs = list(compiled(x, w))
    base = weakref.ref(outs[0]._base)
    storage = StorageWeakRef(outs[0].untyped_storage())
    grad_fn = outs[0].grad_fn
    del x
    # While one output lives, its base lives (eager keeps it through ._base).
    last = outs.pop()
    del outs, grad_fn
    gc.collect()
    assert base() is not None and last._base is base()
    del last
    gc.collect()
    assert base() is None
    assert storage.expired()


def test_inputs_are_not_retained_by_the_compiled_program() -> None:
    compiled = torch.compile(split_of_input, backend=pv.backend("aot_eager", strict=True))
    x = torch.randn(ROWS, COLS)
    x_ref = weakref.ref(x)
    outs = compiled(x, _weight("split_of_input"))
    assert outs[0]._base is x  # outputs view the input, so they keep it alive ...
    del x, outs
    gc.collect()
    assert x_ref() is None  # ... and nothing else does


def test_compile_function_keeps_memory_flat() -> None:
    compiled = pv.compile_function(unbind_of_intermediate, inner="aot_eager", strict=True)
    w = _weight("unbind_of_intermediate")
    _run_calls(compiled, w, 5)
    w.grad = None
    before = live_tensors()
    refs = _run_calls(compiled, w, CALLS // 4)
    w.grad = None
    assert live_tensors() - before < CALLS // 20
    assert all(r.expired() for r in refs)
