"""compile_function's rules about calls its one trace cannot reproduce as eager runs them: which run in eager
between two compiled segments (``RUN_EAGERLY``; Note [Segments] in segments.py), and which make the whole function
run eagerly (Note [compile_function falls back to eager] in compile_function.py). Under Dynamo, stock meets them as a
graph break (an input's metadata mutation, a non-contiguous ``out=``) or traces them as the backend does."""

from __future__ import annotations

import torch
from torch import fx

from . import graph_ops
from .graph_meta import GraphMeta, graph_meta
from .pipeline import input_alias_groups


def mark_calls_to_run_eagerly(gm: fx.GraphModule, example: list[torch.Tensor]) -> None:
    """Mark the calls of ``gm`` that compiled code cannot run as eager does, over one metadata record: an input's
    metadata mutations and writes over a call's own input in another layout."""
    meta = graph_meta(
        gm,
        grad_enabled=torch.is_grad_enabled(),
        input_alias_groups=input_alias_groups(example),
        input_requires_grad=[t.requires_grad for t in example],
    )
    _mark_overlapping_writes(meta.nodes, meta.root)
    _mark_input_metadata_mutations(meta)


def _mark_input_metadata_mutations(meta: GraphMeta) -> None:
    """Mark the metadata mutations (``x.t_()``, ``x.unsqueeze_(1)``) of an input that compiled code cannot apply
    as eager does, to run in eager between two compiled segments (``RUN_EAGERLY``; Note [Segments]), where Dynamo
    breaks the graph at the same call. AOTAutograd applies an input's final metadata after the compiled region with
    one ``as_strided_``, or nothing where it ends as it was, so eager's version bumps, which the input shares with
    its aliases, differ:

    - on the input itself, always: an alias's grad_fn not regenerated (fuzzer s41_188), a tensor AOTAutograd saved
      from an aliased input gone stale where eager's is not (s53_604), a zero gradient for a base eager's graph
      never reaches (s52_634);
    - on a view of an input, when a later differentiable op may save that input: the saved input is at a newer
      version than it saved, a backward error eager does not raise (found by the fuzzer).
    Where the cut is refused, the reason becomes the function's fallback (fallback_rules.call_to_run_eagerly).
    """
    nodes, root, requires_grad = meta.nodes, meta.root, meta.requires_grad
    mutated: dict[fx.Node, fx.Node] = {}  # input root -> its first metadata mutation
    for n in nodes:
        if graph_ops.is_metadata_mutation(n) and not graph_ops.is_storage_mutation(n):
            if (target := returned_input(n)) is not None:
                n.meta[graph_ops.RUN_EAGERLY] = f"{graph_ops.op_name(n)} of {target}"
                continue
            base = root.get(graph_ops.mutated_input(n))  # type: ignore[arg-type]
            if base is not None and base.op == "placeholder":
                mutated.setdefault(base, n)
        elif (
            n in requires_grad
            and not (graph_ops.is_view(n) or graph_ops.is_view_getitem(n) or graph_ops.backward_reads_no_input(n))
            and any(root.get(i) in mutated for i in n.all_input_nodes)
        ):
            m = next(mutated[root[i]] for i in n.all_input_nodes if root.get(i) in mutated)
            m.meta[graph_ops.RUN_EAGERLY] = f"{graph_ops.op_name(m)} of {graph_ops.mutated_input(m)}"


UNFAITHFUL = "the trace cannot reproduce it"


def metadata_mutation_of_a_returned_input(gm: fx.GraphModule) -> str | None:
    """A metadata mutation (``t_``, ``unsqueeze_``) of a dropout that returns its input in eager (p=0, eval):
    eager changes the sizes of that input and of every tensor that is it, where the trace, whose dropout allocates,
    changed a copy's; every later traced size is wrong (fuzzer s1501_1617, where stock runs)."""
    for n in gm.graph.nodes:
        target = graph_ops.mutated_input(n) if graph_ops.is_metadata_mutation(n) else None
        while target is not None and target.op == "call_function":
            if graph_ops.is_dropout(target) and graph_ops.returns_its_input(target):
                what = f"{graph_ops.op_name(n)} of {target}"
                return f"{what}, which is its input itself in eager but a fresh tensor in the trace: {UNFAITHFUL}"
            target = graph_ops.mutated_input(target) or (
                target.args[0] if graph_ops.is_input_returned_by_a_fresh_op(target) else None
            )
    return None


def _mark_overlapping_writes(nodes: list[fx.Node], root: dict[fx.Node, fx.Node]) -> None:
    """Mark a call that writes a tensor overlapping, in another layout, a tensor the same call reads
    (``torch.sin(x.t(), out=x)``, ``x.add_(x.t())``) to run in eager (Note [Segments]). Eager raises "unsupported
    operation" where both are dense, or computes in its iteration order, reading elements it already wrote; the
    functional graph reads everything first (fuzzer s1402_547). Dynamo breaks the graph at an ``out=`` call whose
    out tensor is not contiguous, so stock keeps eager's result there."""
    for n in nodes:
        if graph_ops.runs_eagerly(n) is not None or graph_ops.is_opaque_call(n):
            continue
        written = graph_ops.written_args(n)
        for w in written:
            read = (r for r in n.all_input_nodes if r not in written and root.get(r) is root.get(w))
            if (r := next((r for r in read if _partially_overlap(w, r)), None)) is not None:
                n.meta[graph_ops.RUN_EAGERLY] = (
                    f"{graph_ops.op_name(n)} writes {w}, which overlaps its input {r}: {UNFAITHFUL}"
                )
                break


def _partially_overlap(a: fx.Node, b: fx.Node) -> bool:
    """Whether two aliases of one storage share an element in different layouts (not known: True)."""
    x, y = a.meta.get("val"), b.meta.get("val")
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        return True
    try:
        layout = [(t.dtype, t.shape, t.stride(), t.storage_offset()) for t in (x, y)]
        if layout[0] == layout[1]:
            return False  # the same elements at the same positions: eager's and the functional results agree
        if x.numel() == 0 or y.numel() == 0:
            return False
        spans = []  # the bytes each may touch
        for t in (x, y):
            reach = [(int(s) - 1) * int(st) for s, st in zip(t.shape, t.stride())]
            first = int(t.storage_offset()) + sum(min(r, 0) for r in reach)
            last = int(t.storage_offset()) + sum(max(r, 0) for r in reach)
            spans.append((first * t.element_size(), (last + 1) * t.element_size() - 1))
        return spans[0][0] <= spans[1][1] and spans[1][0] <= spans[0][1]
    except Exception:  # symbolic sizes: assume they overlap
        return True


def returned_input(node: fx.Node) -> fx.Node | None:
    """The placeholder ``node`` is, following in-place calls (which return their first argument)."""
    while node.op != "placeholder":
        target = graph_ops.mutated_input(node)
        if target is None:
            return None
        node = target
    return node
