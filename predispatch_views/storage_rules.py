"""Stage 2b, one rule: a storage change (``set_``, ``resize_``, an out= call that resizes its out tensor).

Note [set_ between segments]
Functionalization cannot express a storage swap, and a replayed view would see another storage than eager's, so
a graph with one used to fall back (compile_function ran the function eagerly). ``with torch.no_grad():
a.set_(b)``, or ``y.resize_(12)``, is cut around instead (Note [Segments]): the program before it is compiled, the
grad-mode region holding it runs in eager on the real tensors, and the program after it is compiled, handed ``a``
as eager left it (sharing ``b``'s storage: a segment whose inputs alias each other, as a graph after a graph
break). Not where an alias of the changed storage taken before the call is read after it (``a_view = a.view(-1);
a.set_(t); a_view.mul_(2)``): that view keeps the old storage while its ``_base`` has the new one, and AOTAutograd
regenerates it with ``as_strided``. An out= call that resizes its out tensor still falls back. A segment
AOTAutograd refuses (inputs sharing storage with mixed ``._base`` states, upstream
``test_set__and_data_mutation_good``) falls back as before.
"""

from __future__ import annotations

from torch import fx

from . import graph_ops
from .fallbacks import Fallback, FallbackKind
from .graph_meta import GraphMeta


def storage_change(meta: GraphMeta) -> Fallback | None:
    for n in meta.mutations:
        if graph_ops.is_storage_mutation(n) and not _resizes_only_fresh_tensors(meta, n):
            message = f"{graph_ops.op_name(n)} changes a tensor's storage ({n.name})"
            if graph_ops.schema_name(n) not in graph_ops.STORAGE_MUTATIONS or _views_kept_across(meta, n):
                return Fallback(FallbackKind.STORAGE_CHANGE, message)
            return Fallback(FallbackKind.STORAGE_CHANGE, message, cut_after=n, run_eagerly=True, eagerly_through=n)
    return None


def _views_kept_across(meta: GraphMeta, n: fx.Node) -> bool:
    """Whether an alias of the storage ``n`` swaps out, taken before it, is read after it (a view that keeps the old
    storage while its ``_base`` gets the new one: AOTAutograd regenerates it with ``as_strided``)."""
    root, at = meta.root.get(graph_ops.mutated_input(n)), meta.order[n]
    return any(
        meta.root.get(v) is root and meta.order[v] < at and any(meta.order[u] > at for u in v.users)
        for v in meta.nodes
        if v is not root
    )


def _resizes_only_fresh_tensors(meta: GraphMeta, n: fx.Node) -> bool:
    """An out= call that resizes out tensors the graph made itself (``o = torch.empty(0); torch.sin(x, out=o)``),
    none of which anything aliases before the call: no other tensor sees the old storage, and AOTAutograd's
    functionalization gives the out tensor its new one as eager does. Not ``resize_``/``set_`` themselves. An out
    tensor it does not resize is written in place, as by any in-place call (``torch.sort(a, 0, out=(a, i))``)."""
    if graph_ops.schema_name(n) in graph_ops.STORAGE_MUTATIONS:
        return False
    order = meta.order
    for w in graph_ops.resized_args(n):
        if w.op == "placeholder" or meta.root.get(w) is not w:
            return False
        if any(meta.root.get(a) is w and a is not w and order[a] < order[n] for a in meta.nodes):
            return False
    return True
