"""The runtime record of the views stock's programs returned (Note [Stock's views across a graph break])."""

from __future__ import annotations

import gc

import pytest
import torch

import predispatch_views
from predispatch_views import stock_views
from predispatch_views.compare.fuzz_program import ReturnsInput


def test_views_are_recorded_while_they_live() -> None:
    base = torch.randn(4, 3)
    other = torch.randn(4, 3)
    view = base[1]
    stock_views.record_stock_views((view, other, 3))  # a fresh tensor and a non-tensor are not views: not recorded
    assert stock_views.shares_storage_with_a_stock_view(base)
    assert stock_views.shares_storage_with_a_stock_view(base.t())  # any alias of the storage
    assert not stock_views.shares_storage_with_a_stock_view(other)
    assert not stock_views.shares_storage_with_a_stock_view(None)
    del view
    gc.collect()
    assert not stock_views.shares_storage_with_a_stock_view(base)  # the view died: the storage counts no more


def test_dead_entries_are_purged() -> None:
    for _ in range(3000):
        stock_views.record_stock_views(torch.randn(2, 2)[0])  # each view dies at once
    assert len(stock_views._RECORDED) <= 2048


def test_a_call_replays_unless_an_input_shares_storage_with_a_stock_view() -> None:
    used: list[int] = []
    run = stock_views.replay_unless_stock_views(lambda *a: "replay", lambda *a: "stock", [1], used.append)
    mine, theirs = torch.randn(3), torch.randn(3, 2)
    assert run(mine, mine) == "replay" and used == []
    returned = stock_views.recording_stock_views(lambda x: (x.t(), x * 2))(theirs)
    assert run(mine, theirs) == "stock" and used == [1]
    assert run(theirs, mine) == "replay"  # only the listed inputs are checked
    del returned


def test_a_view_recorded_twice_is_one_entry() -> None:
    """A WeakSet compared tensors with ``==`` (elementwise, ambiguous as a bool) when a program returned the same
    view twice, or returned it again on a later call while the first was alive (fuzzer s904_259)."""
    base = torch.randn(3, 4)
    view = base[:, 1:]
    stock_views.record_stock_views((view, view))
    stock_views.record_stock_views([view])
    assert stock_views.shares_storage_with_a_stock_view(base)


def test_an_output_eager_restricts_is_recorded_though_stock_returns_no_view() -> None:
    base = torch.randn(4, 3)
    plain = base.mul(1)  # stock's unbind output under the unsafe fix: no view, its storage the intermediate's
    stock_views.record_stock_views((plain, base[0]), frozenset({0}))
    assert stock_views.shares_storage_with_a_stock_view(plain)
    other = torch.randn(3)
    stock_views.record_stock_views((other,))  # no view, not restricted: not recorded
    assert not stock_views.shares_storage_with_a_stock_view(other)


def program_after_two_breaks(a: torch.Tensor) -> tuple[torch.Tensor, ...]:  # fuzzer s1820_651
    t0 = a.add(1.0)
    t1 = ReturnsInput.apply(a)
    t2 = t0.exp()
    with torch.no_grad():
        t1.sin_()  # the first graph falls back: the Function's view written under no_grad
    _, t4, t5 = t2.unbind(0)
    u0, u1 = torch.empty(0), torch.empty(0, dtype=torch.long)
    with torch.no_grad():
        torch.min(t5, 1, out=(u0, u1))  # a graph break
    with torch.no_grad():
        t6 = t5.narrow(1, 0, 2)  # a view of stock's t5, of its full geometry
    u2, u3 = torch.empty(0), torch.empty(0, dtype=torch.long)
    with torch.no_grad():
        torch.min(t6, 0, out=(u2, u3))  # another: the resumed graph ends at a break too
    return t5, t6, t4.exp()


def test_a_resumed_graph_that_ends_at_a_break_checks_its_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph between the two breaks returns a no_grad view of ``t5``, stock's unbind output (no view: the
    unsafe fix), which the caller may write where eager's refuses; eager's no_grad view of it then refused its
    ``grad_fn``, a crash where stock runs. Three things let it through: the resume function's graph, ending at a
    break, was taken for the user's first graph (its ``compile_subgraph_reason`` names the user's function); the
    ``narrow`` of the whole tensor counted as a possible identity, not a no_grad view; and stock's ``t5`` was no
    view, so not recorded as stock's. Now the call runs stock's program, stock's answer.

    The first graph fell back because its cut was refused; since the uncompiled segment runs through the no_grad
    write (Note [Segments]) it no longer does, so the refusal is forced here: the case is any first graph that
    falls back. Without it, the program is eager's, ``t5`` included."""

    def make() -> torch.Tensor:
        return torch.randn(3, 1, 2, generator=torch.Generator().manual_seed(0)).requires_grad_()

    eager = program_after_two_breaks(make())
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        eager[0].mul_(2)
    assert eager[1].grad_fn is None

    torch._dynamo.reset()
    compiled = torch.compile(program_after_two_breaks, backend=predispatch_views.backend("aot_eager"))
    t5, t6, _ = compiled(make())
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        t5.mul_(2)  # eager's t5
    assert t6.grad_fn is None

    monkeypatch.setattr(predispatch_views.pipeline, "compile_in_segments", lambda *args, **kwargs: None)
    torch._dynamo.reset()
    compiled = torch.compile(program_after_two_breaks, backend=predispatch_views.backend("aot_eager"))
    t5, t6, _ = compiled(make())
    t5.mul_(2)  # eager refuses (a multi-output view); stock's t5 accepts it
    assert type(t6.grad_fn).__name__ == "AsStridedBackward0"  # stock's answer; it raised before
