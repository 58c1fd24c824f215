"""The runtime record of the views stock's programs returned (Note [Stock's views across a graph break])."""

from __future__ import annotations

import gc

import torch

from predispatch_views import stock_views


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
