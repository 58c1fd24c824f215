"""Stage 3b, one small graph transform on the core: a core output whose alias the core's backward saves gets a
version counter of its own, and the runtime watches it for eager's error.

Note [A saved alias of a value the caller can write]
``t0 = a.sum(2); t1 = t0.transpose(1, 0); t2 = t1.sin(); return t1, t2.detach() * 3``: the epilogue replays
``t1`` from the core's output ``sum_1``, and the core's compiled backward saves ``transpose`` for ``sin``. Run by
an eager-mode backend (aot_eager), that saved ``transpose`` is a view of the core's output, so it shares the
version counter of every view the epilogue takes of that output. A caller who writes ``t1`` in place and then
backwards through ``t1`` alone met "one of the variables needed for gradient computation has been modified by an
inplace operation" from the compiled backward: it unpacks every saved tensor whenever any output of the core gets
a gradient. Eager's backward never reaches ``SinBackward0`` there and runs; stock runs too (it returns ``t1``
through ``_unsafe_view``, with a version counter of its own: AOTAutograd's Note [Intermediate Bases
Optimization]). Fuzzer s1808_2663.

The core returns such an output as ``_unsafe_view(value)``: the same storage, a version counter of its own, and no
view relation autograd would track (what AOTAutograd does for an output aliasing an intermediate). The compiled
backward's saved alias then never sees the caller's writes. Eager's error where eager's backward does reach the
saver is kept by a watch (Note [Eager's version error] in version_watches.py): a pre-hook on the core's node raises it
when a gradient arrives at an output computed from the saver and the returned value's version has moved since the
core returned it. Only for a call autograd records (a call under no_grad saves nothing), only where the core may
be differentiated (the slicer is given which inputs require grad), only for an output that no other core output
aliases (each would get a counter of its own where eager's share one), and not for values the core saves as an
op's result (those are watched by Note [Eager's version error] already), nor for an in-place op, whose backward
reads its input's old value from a copy autograd saves (fuzzer s1502_2277: ``t1.sin_()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .graph_meta import alias_roots, recorded_calls


@dataclass(frozen=True)
class SavedAliasWatch:
    output: int  # the core output the caller can write
    readers: tuple[int, ...]  # the core outputs computed from a node whose backward saved an alias of it
    saved_shape: tuple[int, ...]  # the shape of that saved alias, for eager's message


def separate_saved_aliases(
    graph: fx.Graph, returned: list[fx.Node], input_requires_grad: Sequence[bool]
) -> tuple[list[fx.Node], tuple[SavedAliasWatch, ...]]:
    """``returned`` (the core's outputs, in ``graph``), each output whose alias a backward saves replaced by its
    ``_unsafe_view``, and the watches for the runtime; see the Note. The graph runs in the current grad mode."""
    nodes = list(graph.nodes)
    storage = {n: ti.storage_ref(graph_ops.example_value(n)) for n in nodes}
    inputs = {storage[p] for p in graph.find_nodes(op="placeholder")} - {None}
    # An input's alias by the graph's structure too: a dropout with p=0 returns its input, where its fake value
    # does not share the input's storage (Note [Ops that return their input] in graph_ops.py).
    roots = alias_roots(nodes, None)
    of_inputs = {n for n in nodes if storage[n] in inputs or roots[n].op == "placeholder"}
    recorded = recorded_calls(nodes, torch.is_grad_enabled(), input_requires_grad)
    positions: dict[object, list[int]] = {}
    for k, r in enumerate(returned):
        if storage[r] is not None and r not in of_inputs:
            positions.setdefault(storage[r], []).append(k)
    savers: dict[object, list[tuple[fx.Node, fx.Node]]] = {}  # storage -> (saver, the alias it saves)
    for n in nodes:
        if n.op not in ("call_function", "call_method") or n not in recorded or graph_ops.mutated_input(n) is not None:
            continue  # an in-place op's backward reads its input's old value: autograd saves a copy (original_self)
        if (reads := graph_ops.saved_by_backward(n)) is None:
            continue
        for a in reads[0]:
            if a not in of_inputs and len(positions.get(storage.get(a), ())) == 1:
                savers.setdefault(storage[a], []).append((n, a))
    if not savers:
        return returned, ()
    returned = list(returned)
    watches = []
    for ref, found in savers.items():
        (k,) = positions[ref]
        below = set().union(*({s} | graph_ops.descendants(s) for s, _ in found))
        readers = tuple(j for j, m in enumerate(returned) if m in below)
        returned[k] = _unsafe_view(graph, returned[k])
        shape = graph_ops.example_value(found[0][1]).shape
        watches.append(SavedAliasWatch(k, readers, tuple(int(s) if isinstance(s, int) else -1 for s in shape)))
    return returned, tuple(watches)


def _unsafe_view(graph: fx.Graph, value: fx.Node) -> fx.Node:
    """Appended to ``graph``, which has no output node yet."""
    sizes: list[object] = []
    for d, s in enumerate(graph_ops.example_value(value).shape):
        if isinstance(s, torch.SymInt):
            size = graph.call_function(torch.ops.aten.sym_size.int, (value, d))
            size.meta = {"val": s, "example_value": s}
            sizes.append(size)
        else:
            sizes.append(int(s))
    node = graph.call_function(torch.ops.aten._unsafe_view.default, (value, sizes))
    node.meta = {**value.meta, _SEPARATED: True}
    return node


_SEPARATED = "predispatch_views_separated_version"


def separated_value(n: Any) -> Any:
    """The value an output returned through its separating ``_unsafe_view`` stands for; ``n`` otherwise."""
    return n.args[0] if isinstance(n, fx.Node) and n.meta.get(_SEPARATED) else n
