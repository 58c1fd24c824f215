"""Stage 3: split the view-preserving functional graph into a compiled core and an eager epilogue.

A pure function, like JAX's partial evaluation into known and residual parts: nodes tagged by
functionalize.py form the epilogue; everything else is the core. The core returns exactly the values the
epilogue or the program's outputs read from it (the bases of the aliased outputs and the plain outputs); graph
inputs are never routed through the core, the epilogue reads them directly.

Note [A base the epilogue only detaches]
A core value that the epilogue reads only through ``detach()`` (``return t.sin(), (b @ b.t()).detach()``)
carries no gradient in eager: nothing differentiates through it, so eager's ``b.grad`` stays None when the
other outputs do not use ``b``. Returned as it is, the core output would require grad, AOTAutograd would give
it a (zero) tangent, and the compiled backward would write zeros into ``b.grad``. The core returns
``detach(value)`` instead: it aliases the value as eager's detach does, needs no tangent, and the epilogue's
own ``detach`` of it is eager's result (found by the fuzzer, s21_752). Readers inside the core do not count: they
read the value itself there (s1312_567: ``t0 = a.sum(0)`` read by a dropout in the core and returned through
``t0.detach().mul_(3.0)``; a core compiled whole, as with symbolic sizes, gave ``a.grad`` zeros).

Note [Independent parts of the core]
Compiled as one function, the core is one autograd node: a backward through some of its outputs runs the whole
compiled backward, which gives every input that requires grad a gradient (zeros where eager's graph never
reaches it: eager leaves ``.grad`` at None) and frees the saved tensors of outputs eager keeps in separate
graphs (a second backward through those raises where eager's does not). Found by the fuzzer: s51_471
(``b @ b.t()`` and ``a.sum(0)`` in one core, a backward of the first alone gave ``a``'s base zeros) and s43_704.
Eager's graph has one node per op, so outputs computed from disjoint sets of intermediates are unrelated in it.
``split_core`` cuts the core into such parts, one compiled function each; parts may share graph inputs, as
eager's ops do. What must stay in one part, so that running the parts one after the other is the core's order:
- everything connected through an intermediate value (a use, a view, an in-place write all are edges);
- every reader of a graph input that some node writes, with the inputs aliasing it, where it reads after the first
  write (a write of an input must not move across a read of it or of an alias; AOTAutograd applies input writes
  when its function returns). A read of another alias before every write may stay in a part of its own where
  that part runs before the writes' (fuzzer s1811_277: ``t0 = c.sin()``, then ``b.mul_(2.0)`` with ``b`` and ``c``
  views of one base: one part saved ``c`` for ``sin`` and returned ``b``'s new value, so a backward through ``c``
  unpacked the saved ``c`` the write had bumped and raised where eager's never reaches ``sin``). A read of the
  written input itself (or of its own view) stays: AOTAutograd's trace of the whole core raises the version error
  there, which Note [A write to a value a backward saved] turns into eager's own nodes, where a part that saved it
  would raise at run time naming AOTAutograd's ``copy_`` (tests/test_segments.py, test_saved_value_writes.py);
- every op that draws random numbers or has another side effect, so their order is kept; a custom Function or a
  checkpointed region (Note [Custom autograd.Functions in the core] in capture.py) counts as one, since the
  partition does not read its body (fuzzer s1002_838: a Function kept the whole core one compiled function, whose
  backward refuses a second call, where eager's two independent outputs take one backward each), unless the
  capture watched its forward run and saw no random draw, no side effect and no write of its inputs' storages
  (``EFFECT_FREE``; fuzzer s1822_704: ``ScaledClone.apply(c)`` in one part with ``d.mul(-0.5).bernoulli_()``
  freed that part's saved values at a backward through the Function's output, and a second backward through
  the other output raised where eager's runs).
Grad mode changes are copied into every part, so each op runs under the grad mode it had; a core ends in the
grad mode it began in (Dynamo's and make_fx's graphs do), so each part does, and one that does not stays whole.
A core with any other kind of node (another higher-order op, autocast, a symbolic size input) stays whole too.
What stays as in stock: outputs that share an intermediate share one backward, and so its zero gradients.
Each part is one more compiled function to call (AOTAutograd's runtime wrappers, one autograd node): about
0.15-0.25 ms per part per forward+backward on CPU (scripts/core_parts_cost.py, design/05). So the pipeline
keeps the core whole where no backward can follow: grad mode off, or no input requiring grad. And a part that
reads no tensor input and computes nothing that requires grad (a constant made on each call, as ``torch.arange``
for a cache's positions: mistral_sliding had two such parts) joins another part: it has no autograd node to keep
apart.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .functionalize import EPILOGUE_TAG
from .graph_meta import alias_roots
from .saved_aliases import VersionWatch, separate_saved_aliases


@dataclass(frozen=True)
class InputSource:
    """Where an epilogue input comes from at runtime."""

    kind: Literal["arg", "core"]
    index: int


@dataclass(frozen=True)
class CorePart:
    """One independently compiled part of the core; see Note [Independent parts of the core]."""

    graph: fx.GraphModule  # one placeholder per entry of `inputs`
    inputs: tuple[int, ...]  # the program inputs it takes, by position
    outputs: tuple[int, ...]  # the core outputs it returns, by position, in order


@dataclass(frozen=True)
class SlicedProgram:
    core: fx.GraphModule  # same placeholders as the program; returns the core outputs
    epilogue: fx.GraphModule  # one placeholder per entry of `sources`; returns the program's outputs
    sources: tuple[InputSource, ...]
    parts: tuple[CorePart, ...]  # the core, cut into independent parts (one: the whole core)
    saved_alias_watches: tuple[VersionWatch, ...] = ()  # saved_aliases.py

    @property
    def core_is_empty(self) -> bool:
        return not any(n.op in ("call_function", "call_method", "call_module") for n in self.core.graph.nodes)


def slice_graph(
    functional: fx.GraphModule,
    input_alias_groups: Sequence[int] | None = None,
    input_requires_grad: Sequence[bool] | None = None,
) -> SlicedProgram:
    """``input_alias_groups``: for each input, the first input sharing its storage (see pipeline.py); without
    it the core stays whole. ``input_requires_grad``: given where a backward may follow (Note [A saved alias of a
    value the caller can write] in saved_aliases.py); the graph runs in the current grad mode."""
    nodes = list(functional.graph.nodes)
    output = nodes[-1]
    is_epilogue = {n: bool(n.meta.get(EPILOGUE_TAG)) for n in nodes}
    placeholder_index = {n: i for i, n in enumerate(functional.graph.find_nodes(op="placeholder"))}

    # Values crossing the cut, in program order.
    crossing = [
        n
        for n in nodes
        if n is not output and not is_epilogue[n] and any(u is output or is_epilogue[u] for u in n.users)
    ]
    core_outputs = [n for n in crossing if n not in placeholder_index]
    core_index = {n: i for i, n in enumerate(core_outputs)}

    core_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in nodes:
        if n is not output and not is_epilogue[n]:
            env[n] = core_graph.node_copy(n, env.__getitem__)
    returned = [
        _detached_if_only_detached(core_graph, env[n], [u for u in n.users if u is output or is_epilogue[u]])
        for n in core_outputs
    ]
    watches: tuple[VersionWatch, ...] = ()
    if input_requires_grad is not None:  # Note [A saved alias of a value the caller can write] in saved_aliases.py
        read_inputs = {env[n] for n in crossing if n in placeholder_index}
        returned, watches = separate_saved_aliases(core_graph, returned, input_requires_grad, read_inputs)
    core_graph.output(tuple(returned))

    epilogue_graph = fx.Graph()
    sources: list[InputSource] = []
    env = {}
    for n in crossing:
        env[n] = epilogue_graph.placeholder(n.name)
        env[n].meta = dict(n.meta)
        if n in placeholder_index:
            sources.append(InputSource("arg", placeholder_index[n]))
        else:
            sources.append(InputSource("core", core_index[n]))
    for n in nodes:
        if is_epilogue[n]:
            env[n] = epilogue_graph.node_copy(n, env.__getitem__)
    epilogue_graph.output(fx.map_arg(output.args[0], env.__getitem__))

    core = ti.lazy_graph_module(functional, core_graph)
    return SlicedProgram(
        core=core,
        epilogue=ti.lazy_graph_module(functional, epilogue_graph),
        sources=tuple(sources),
        parts=split_core(core, input_alias_groups) if input_alias_groups is not None else _whole(core),
        saved_alias_watches=watches,
    )


def split_core(core: fx.GraphModule, input_alias_groups: Sequence[int]) -> tuple[CorePart, ...]:
    """The core's independent parts, in program order; see Note [Independent parts of the core]."""
    nodes = list(core.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    outputs = list(core.graph.output_node().args[0])
    kind = {n: _kind(n) for n in nodes}
    toggles = [n.args[0] for n in nodes if kind[n] == "grad_mode"]
    if "unknown" in kind.values() or (toggles and toggles[-1] == toggles[0]):  # parts would chain the grad mode
        return _whole(core)
    # A symbolic size input (dynamic shapes) joins nothing, and every part takes it: a part without it had its
    # sizes recovered in the compiled backward from a saved tensor, which a caller's write then broke (s1402_491).
    tensors = [p for p in placeholders if isinstance(p.meta.get("val"), torch.Tensor)]
    group = {p: input_alias_groups[i] for i, p in enumerate(placeholders)}
    parent: dict[object, object] = {}

    def find(x: object) -> object:
        while x in parent:
            x = parent[x]
        return x

    def union(x: object, y: object) -> None:
        if (rx := find(x)) != (ry := find(y)):
            parent[rx] = ry

    ordered = [n for n in nodes if kind[n] == "ordered"]
    for n in ordered[1:]:
        union(n, ordered[0])
    # An input some node writes (through any alias): its readers, and its aliases' readers, stay together.
    root = alias_roots(nodes, input_alias_groups)
    written = {group[root[w]] for n in nodes for w in graph_ops.written_args(n) if root.get(w) in group}
    computed = [n for n in nodes if kind[n] in ("op", "ordered")]
    order = {n: k for k, n in enumerate(nodes)}
    first_write: dict[int, int] = {}
    for n in nodes:
        for w in graph_ops.written_args(n):
            if root.get(w) in group:
                first_write.setdefault(group[root[w]], order[n])
    own_root = alias_roots(nodes, None)  # each input on its own, not with the inputs aliasing it
    written_inputs = {own_root.get(w) for n in nodes for w in graph_ops.written_args(n)}
    early: list[tuple[fx.Node, int]] = []  # a read of a written input's other alias before its first write
    for n in computed:
        for i in n.all_input_nodes:
            if i.op != "placeholder":
                union(n, i)
            if (g := group.get(root.get(i))) in written:  # type: ignore[arg-type]
                if order[n] < first_write[g] and own_root[i] not in written_inputs and not graph_ops.written_args(n):
                    early.append((n, g))
                else:
                    union(n, ("written input", g))
    first = {}
    for n in computed:
        first.setdefault(find(n), order[n])
    if any(
        find(n) != find(("written input", g)) and first[find(n)] > first[find(("written input", g))] for n, g in early
    ):
        for n, g in early:  # a part that would run after the write it must precede: the reads join the writes
            union(n, ("written input", g))

    members: dict[object, list[fx.Node]] = {}
    for n in computed:
        members.setdefault(find(n), []).append(n)
    out_positions: dict[object, list[int]] = {}
    for k, o in enumerate(outputs):
        out_positions.setdefault(find(o), []).append(k)
    # A part with no output, no input write and no side effect is dead code: AOTAutograd would drop it too.
    effects = {find(("written input", g)) for g in written} | {find(n) for n in ordered}
    kept = [r for r in members if r in out_positions or r in effects]
    if inert := [r for r in kept if r not in effects and _inert(members[r])]:  # the Note's last paragraph
        into = next((r for r in kept if r not in inert), inert[0])
        for r in (r for r in inert if r is not into):
            members[into] += members.pop(r)
            out_positions[into] = sorted(out_positions.get(into, []) + out_positions.pop(r))
        kept = [r for r in kept if r in members]
    unread = any(not p.users for p in tensors)
    if not kept or (len(kept) == 1 and len(members) == 1 and not unread):
        return _whole(core)
    # One part that leaves dead code or an unread input behind is still cut out of the core: an input the compiled
    # function takes but does not differentiate gets a None gradient, which torch 2.13's compiled autograd adds
    # to the gradient another path gives it ("add(): argument 'other' must be Tensor, not NoneType", fuzzer
    # s1103_185: a dead ``select`` of a replayed view kept that view an input of the core).
    return tuple(_part(core, nodes, set(members[r]), out_positions.get(r, []), outputs) for r in kept)


def _inert(members: list[fx.Node]) -> bool:
    """A part that reads no tensor input and computes no value that requires grad (a constant it reads included):
    no autograd node of its own (Note [Independent parts of the core], its last paragraph)."""
    for n in members:
        value = n.meta.get("val", n.meta.get("example_value"))
        if n.op not in ("call_function", "get_attr") or value is None or getattr(value, "requires_grad", False):
            return False
        for i in (i for i in n.all_input_nodes if i.op == "placeholder"):
            if not isinstance(i.meta.get("val", i.meta.get("example_value")), (int, torch.SymInt)):
                return False
    return True


def _whole(core: fx.GraphModule) -> tuple[CorePart, ...]:
    n_inputs = len(core.graph.find_nodes(op="placeholder"))
    n_outputs = len(core.graph.output_node().args[0])
    return (CorePart(core, tuple(range(n_inputs)), tuple(range(n_outputs))),)


def _part(
    core: fx.GraphModule, nodes: list[fx.Node], members: set[fx.Node], positions: list[int], outputs: list[fx.Node]
) -> CorePart:
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    inputs = []
    for i, p in enumerate(n for n in nodes if n.op == "placeholder"):
        if any(u in members for u in p.users) or not isinstance(p.meta.get("val"), torch.Tensor):
            env[p] = graph.node_copy(p)
            inputs.append(i)
    for n in nodes:
        if n in members or graph_ops.is_grad_mode_change(n):
            env[n] = graph.node_copy(n, env.__getitem__)
    graph.output(tuple(env[outputs[k]] for k in positions))
    return CorePart(ti.lazy_graph_module(core, graph), tuple(inputs), tuple(positions))


def _kind(n: fx.Node) -> str:
    """placeholder, output, grad_mode, op (a pure op, or one writing its arguments), ordered (random or another
    side effect), or unknown (a node the partition does not reason about)."""
    if n.op in ("placeholder", "output"):
        return n.op
    if n.op == "get_attr" or graph_ops.is_sym(n) or (n.op == "call_function" and n.target is operator.getitem):
        return "op"
    if graph_ops.is_grad_mode_change(n):
        return "grad_mode"
    if graph_ops.is_opaque_call(n):  # Note [Independent parts of the core]: a body with effects keeps its order
        return "op" if n.meta.get(graph_ops.EFFECT_FREE) else "ordered"
    if not graph_ops.is_aten_call(n):
        return "unknown"
    return "ordered" if graph_ops.has_ordered_effect(n) else "op"


def _detached_if_only_detached(graph: fx.Graph, value: fx.Node, readers: list[fx.Node]) -> fx.Node:
    """See Note [A base the epilogue only detaches]; ``readers``: the value's readers outside the core."""
    if not all(u.op == "call_function" and u.target is torch.ops.aten.detach.default for u in readers):
        return value
    return _detached(graph, value)


def _detached(graph: fx.Graph, value: fx.Node) -> fx.Node:
    detached = graph.call_function(torch.ops.aten.detach.default, (value,))
    detached.meta = dict(value.meta)
    return detached
