"""Stage 2c's rule for what an earlier compiled segment may save that a later write breaks (Note [Segments] in
segments.py): a reader the partitioner may save a value for, or the value's own producer; and the refusal that a
wider uncompiled segment avoids."""

from __future__ import annotations

from torch import fx

from . import graph_ops
from .fallback_rules import may_save
from .graph_meta import GraphMeta, is_any_view
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


def eager_write_refused(meta: GraphMeta, at: fx.Node, first: list[fx.Node], recompute: set[fx.Node]) -> str | None:
    """A call run in eager that writes (a metadata mutation of an input, compile_function) a tensor the compiled
    segment before it may save: the write bumps its version, and the compiled backward would raise where eager's,
    which may not have saved it, does not (the rule for a later compiled segment's writes, Note [Segments])."""
    for w in graph_ops.written_args(at):
        if (saver := compiled_saver(meta, meta.root.get(w, w), set(first), recompute)) is not None:
            return f"{at.name} writes {w.name}, whose {saver} of the compiled segment before it may save"
    return None


def compiled_saver(meta: GraphMeta, root: fx.Node, compiled: set[fx.Node], recompute: set[fx.Node]) -> str | None:
    """What of the ``compiled`` nodes may save a value of ``root``'s storage that a later write would break: a
    reader the partitioner may save ``root`` for (``may_save``), unless tagging the storage for recomputation
    avoids it (added to ``recompute``: Note [Bases the compiled backward must not save]), or ``root``'s own producer
    (``_saves_its_result``), unless its storage can be tagged too and the segment's watch of the result raises
    eager's error where eager's backward reaches the op (Note [Eager's version error]; s1812_406; not under
    compiled autograd, which runs no watch). None when nothing compiled may save it."""
    if (saver := may_save(meta, root, set(meta.nodes) - compiled, set())) is not None:
        if (family := unsaved_storage(meta, root, compiled)) is None:
            return f"base {saver.name}"
        recompute |= family & compiled
    if _saves_its_result(meta, root, compiled):
        if (family := watched_result_family(meta, root, compiled)) is None:
            return f"producer {root.name}"
        recompute |= family & compiled
    return None
