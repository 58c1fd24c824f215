"""Stage 2c's rule for what an earlier compiled segment may save that a later write breaks (Note [Segments] in
segments.py): a reader the partitioner may save a value for, or the value's own producer; and the refusal that a
wider uncompiled segment avoids."""

from __future__ import annotations

import operator

from torch import fx

from . import graph_ops
from .fallback_rules import may_save
from .graph_meta import GraphMeta, hidden_from_autograd, is_any_view
from .output_rules import unsaved_storage, watched_result_family


class RunEagerlyThrough(str):
    """Why a cut around a call is refused, where running the later ``node`` (a write, or a read) in eager too, with
    everything between, avoids it (Note [Segments])."""

    def __new__(cls, reason: str, node: fx.Node) -> RunEagerlyThrough:
        self = super().__new__(cls, reason)
        self.node = node
        return self


def _saves_its_result(meta: GraphMeta, root: fx.Node, compiled: set[fx.Node]) -> bool:
    """A compiled differentiable op whose backward reads its own result (``sigmoid``, ``exp``...: Note [Which ops
    save their result]; any call that is no ATen op, conservatively) saves it. Eager saves it in its own node; the
    compiled segment's outputs share one, so a backward through any of them unpacked it after a later write bumped
    its version, and raised (fuzzer s1103_903)."""
    if root not in compiled or root.op != "call_function" or root not in meta.recorded:
        return False
    if is_any_view(root) or graph_ops.is_metadata_mutation(root) or graph_ops.backward_reads_no_input(root):
        return False
    known = graph_ops.is_aten_call(root) or graph_ops.is_function_apply(root)
    return not known or graph_ops.backward_reads_its_result(root)


class RunEagerlyFrom(str):
    """Why a cut around a call is refused, where starting the uncompiled segment at the earlier ``node`` (the
    compiled saver of what the call writes) avoids it: eager's own node then saves what eager saves, and the
    call's write bumps the version eager's backward checks (Note [Segments]; fuzzer s1826_1926)."""

    def __new__(cls, reason: str, node: fx.Node, root: fx.Node) -> RunEagerlyFrom:
        self = super().__new__(cls, reason)
        self.node, self.root = node, root  # the saver, and the root of the storage the call writes
        return self


def hidden_write_after(meta: GraphMeta, after: fx.Node, root: fx.Node, call: fx.Node) -> bool:
    """A write of ``root``'s storage after ``after``, hidden from autograd (under no_grad, through ``detach``). A
        compiled segment applies it with a version bump more than eager's under aot_eager (AOTAutograd increments the
        version of an input its graph writes, and the graph's own ``copy_`` bumps it again), and the backward error of a
        node eager ran in the uncompiled segment names the count (fuzzer s1826_426: "Exp, is at version 4"). The call's
    results count as that storage: a Function marking its input dirty returns the input itself."""
    roots = {root, meta.root.get(call, call), *(meta.root.get(u, u) for u in call.users)}
    return any(
        meta.order[n] > meta.order[after] and meta.root.get(w, w) in roots and hidden_from_autograd(meta, n, w)
        for n in meta.nodes
        for w in graph_ops.written_args(n)
    )


def eager_write_refused(meta: GraphMeta, at: fx.Node, first: list[fx.Node], recompute: set[fx.Node]) -> str | None:
    """A call run in eager that writes (a metadata mutation of an input, compile_function) a tensor the compiled
    segment before it may save: the write bumps its version, and the compiled backward would raise where eager's,
    which may not have saved it, does not (the rule for a later compiled segment's writes, Note [Segments])."""
    for w in graph_ops.written_args(at):
        if (found := _compiled_saver(meta, meta.root.get(w, w), set(first), recompute)) is not None:
            reason = f"{at.name} writes {w.name}, whose {found[0]} of the compiled segment before it may save"
            return RunEagerlyFrom(reason, found[1], meta.root.get(w, w))
    return None


def compiled_saver(meta: GraphMeta, root: fx.Node, compiled: set[fx.Node], recompute: set[fx.Node]) -> str | None:
    found = _compiled_saver(meta, root, compiled, recompute)
    return None if found is None else found[0]


def _compiled_saver(
    meta: GraphMeta, root: fx.Node, compiled: set[fx.Node], recompute: set[fx.Node]
) -> tuple[str, fx.Node] | None:
    """What of the ``compiled`` nodes may save a value of ``root``'s storage that a later write would break: a
    reader the partitioner may save ``root`` for (``may_save``), unless tagging the storage for recomputation
    avoids it (added to ``recompute``: Note [Bases the compiled backward must not save]), or ``root``'s own producer
    (``_saves_its_result``), unless its storage can be tagged too and the segment's watch of the result raises
    eager's error where eager's backward reaches the op (Note [Eager's version error]; s1812_406; not under
    compiled autograd, which runs no watch). None when nothing compiled may save it."""
    if (saver := may_save(meta, root, set(meta.nodes) - compiled, set())) is not None:
        if (family := unsaved_storage(meta, root, compiled)) is None:
            return f"base {saver.name}", _call_of(saver)
        recompute |= family & compiled
    if _saves_its_result(meta, root, compiled):
        if (family := watched_result_family(meta, root, compiled)) is None:
            return f"producer {root.name}", _call_of(root)
        recompute |= family & compiled
    return None


def _call_of(n: fx.Node) -> fx.Node:
    """The node an uncompiled segment starts at to run ``n`` in eager: a multi-output call for one of its results
    (a Function's ``getitem``), whose tuple is no value a compiled segment could hand over (fuzzer s1829_104)."""
    return n.args[0] if n.target is operator.getitem and isinstance(n.args[0], fx.Node) else n
