"""The pre-dispatch trace: make_fx at the pre-dispatch level, its lazy reads of symbolic sizes moved to where their
value was bound.

Note [make_fx's lazy size reads]
Under symbolic shapes make_fx binds each new SymInt of a traced tensor to a thunk, ``sym_size(t, i)`` (or
``sym_stride``, ``sym_numel``, ``sym_storage_offset``), when it tracks ``t``; the first binding wins, and the
node is emitted only where the SymInt is first used. Between the two, an in-place metadata write
(``t.transpose_(0, 1)``, ``t3.t_()``, ``squeeze_``...) may change ``t``'s sizes: the node then reads the size
after the write where the SymInt stands for the size before it. The graph is wrong at run time where the
tracer's example was right (fuzzer s1810_805: a replayed ``reshape(t6, [core[1], s])`` after a ``transpose_``
got the transposed size). Each such read is moved right after the node that made its tensor, where its value was
bound; it depends on nothing else, so the move is exact. It applies to every pre-dispatch trace (capture,
functionalization, compile_function), and is a no-op with static shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx

_SIZE_READS = (
    torch.ops.aten.sym_size.int,
    torch.ops.aten.sym_stride.int,
    torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_storage_offset.default,
)


def trace_pre_dispatch(fn: Callable[..., Any], args: list[Any]) -> fx.GraphModule:
    """make_fx at the pre-dispatch level; args may be fake tensors (their mode must be active)."""
    return hoist_size_reads(make_fx(fn, pre_dispatch=True, record_module_stack=True)(*args))


def hoist_size_reads(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with every symbolic size read right after its tensor's node (Note [make_fx's lazy size reads])."""
    graph = gm.graph
    placeholders = list(graph.find_nodes(op="placeholder"))
    last_placeholder = placeholders[-1] if placeholders else None
    moved = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _SIZE_READS:
            continue
        source = node.args[0]
        if not isinstance(source, fx.Node):
            continue
        anchor = last_placeholder if source.op == "placeholder" else source
        # Reads of one tensor keep their order: each goes after the reads already moved behind the anchor.
        while anchor.next.op == "call_function" and anchor.next.target in _SIZE_READS and anchor.next is not node:
            anchor = anchor.next
        if anchor.next is node:
            continue
        anchor.append(node)
        moved = True
    if moved:
        graph.lint()
        gm.recompile()
    return gm
