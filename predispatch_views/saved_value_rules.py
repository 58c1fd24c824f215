"""Stage 2b, one rule: a write to a value an earlier node saved for its backward, asked only after the inner
backend's backward trace raised autograd's version error.

Note [A write to a value a backward saved]
``t0 = a.exp(); t0.uniform_()``, or ``t = x @ x.t()`` and later ``x.sin_()`` under no_grad: autograd's record of
``exp`` (of ``mm``) saved a tensor the write then overwrites. Eager's forward runs; its backward raises "one of the
variables needed for gradient computation has been modified by an inplace operation" where it reaches that node, and
only there. AOTAutograd traces the backward while it compiles and raises that error for every call, so stock's compile
fails, and the graph used to run uncompiled (Note [Graphs the inner backend rejects]). The program is cut around a run
of its nodes that runs in eager between two compiled segments (Note [Segments]): from the first node that writes that
storage, saves a value of it, or makes the saved value, through the last write to it. Eager's own nodes then save what
eager's save, and the writes bump the version as eager's do (a compiled segment applies all its writes to an input in
one ``copy_``), so the backward raises the error exactly where and as eager's does, naming eager's node ("which is
output 0 of Sum1, is at version 1"). Cutting around the write alone leaves the saver inside a compiled node, whose
backward unpacks every saved tensor whenever any of its outputs gets a gradient: it would raise where eager's backward
never reaches the saver. The rule is asked only once a first attempt failed (``GraphMeta.cut_around_saved_writes``):
another rule fell back (such a write is often what stops the replay: "writes to intermediate ... after the views are
taken, and sin of the compiled region may save it"), or the inner backend's trace raised the version error (on the
core, or on a graph the backend compiles whole). A program that compiles whole is not cut: each cut costs a compiled
function. A later segment of a program cut for another reason (``later_segment``) is cut only around a value it
computes itself: the writes earlier segments made to its inputs are not in its graph, and a compiled one applies them
in one ``copy_``, so a run on an input could not bump the version as eager's writes did (fuzzer s1805_419: one fewer);
an intermediate's version starts in the segment (s1830_656: ``t2 = b.tanh(); t2.detach().mul_(3.0)`` after a dirty
Function's call). The first segment reads only the
program's inputs, and is cut as the program is (s1829_87). A run that leaves nothing but views to compile runs the
graph uncompiled (Note [A graph whose every computing op runs in eager] in inner_backend.py). Not where compiled
autograd is configured when the graph compiles: its cached backward graphs did not raise the error on
test_autograd.py's test_inplace (dynamo-wrapped), where the graph run uncompiled does.
"""

from __future__ import annotations

import dataclasses

from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .fallbacks import Fallback, FallbackKind
from .graph_meta import GraphMeta


def write_to_a_value_a_backward_saved(meta: GraphMeta) -> Fallback | None:
    """The writes to storages a node autograd recorded earlier saved a value of: every node from the first that
    touches such a storage's version, saves a value of it or makes the saved value, through the last write to one,
    runs in eager (see the Note). None where that run holds a higher-order op (Dynamo's inlined Function, a
    checkpointed region: run as they are, their nodes are not eager's) or a custom Function's call (its dirty
    inputs' version bumps are its own: fuzzer s1805_419 counted one fewer)."""
    if not meta.cut_around_saved_writes or meta.compiled_autograd:
        return None
    saved: dict[fx.Node, tuple[fx.Node, fx.Node]] = {}  # storage root -> (first recorded saver, the value saved)
    touched: list[fx.Node] = []  # the nodes that must run in eager
    first_write: tuple[fx.Node, fx.Node] | None = None  # (the first such write, its saver)
    for n in meta.nodes:
        target = graph_ops.mutated_input(n)
        if target is not None and not graph_ops.is_opaque_call(n):  # a data or metadata write: both bump versions
            root = meta.root.get(target, target)
            if root in saved and root not in touched:
                saver, value = saved[root]
                touched += [root, saver, *([value] if value.op == "call_function" else [])]
                first_write = first_write or (n, saver)
        if n in meta.recorded and n.op in ("call_function", "call_method"):
            for value in saved_values(n):
                saved.setdefault(meta.root.get(value, value), (n, value))
    roots = {r for r in touched if r in saved}
    if meta.later_segment and any(r.op == "placeholder" for r in roots):
        return None  # an earlier segment's writes to this input are not in this graph (see the Note)
    writes = [m for m in meta.nodes if any(meta.root.get(w, w) in roots for w in graph_ops.written_args(m))]
    if first_write is None:
        return None
    nodes = [n for n in touched + writes if n.op == "call_function"]
    first, last = min(nodes, key=meta.order.__getitem__), writes[-1]
    run = meta.nodes[meta.order[first] : meta.order[last] + 1]
    if any(isinstance(n.target, ti.HigherOrderOperator) or graph_ops.is_opaque_call(n) for n in run):
        return None
    write, saver = first_write
    return Fallback(
        FallbackKind.WRITE_TO_A_VALUE_A_BACKWARD_SAVED,
        f"{write.name} ({graph_ops.op_name(write)}) writes a value {saver.name} "
        f"({graph_ops.op_name(saver)}) saved for backward, and the inner backend's backward trace raised the version "
        "error eager raises only in a backward",
        cut_after=first,
        run_eagerly=True,
        eagerly_through=last,
    )


def writes_to_saved_values(meta: GraphMeta) -> bool:
    """Whether the rule, not yet asked of ``meta``, would cut it."""
    if meta.cut_around_saved_writes:
        return False
    return write_to_a_value_a_backward_saved(dataclasses.replace(meta, cut_around_saved_writes=True)) is not None


def saved_values(n: fx.Node) -> list[fx.Node]:
    """The values a call's backward may read: the arguments and result ``saved_by_backward`` names, or all of them
    where that is unknown."""
    reads = graph_ops.saved_by_backward(n)
    if reads is None:
        return [*n.all_input_nodes, n]
    inputs, result = reads
    return [*inputs, n] if result else list(inputs)
