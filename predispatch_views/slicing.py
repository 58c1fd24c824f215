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
own ``detach`` of it is eager's result (found by the fuzzer, s21_752).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import fx

from .functionalize import EPILOGUE_TAG


@dataclass(frozen=True)
class InputSource:
    """Where an epilogue input comes from at runtime."""

    kind: Literal["arg", "core"]
    index: int


@dataclass(frozen=True)
class SlicedProgram:
    core: fx.GraphModule  # same placeholders as the program; returns the core outputs
    epilogue: fx.GraphModule  # one placeholder per entry of `sources`; returns the program's outputs
    sources: tuple[InputSource, ...]

    @property
    def core_is_empty(self) -> bool:
        return not any(n.op in ("call_function", "call_method", "call_module") for n in self.core.graph.nodes)


def slice_graph(functional: fx.GraphModule) -> SlicedProgram:
    nodes = list(functional.graph.nodes)
    output = nodes[-1]
    is_epilogue = {n: bool(n.meta.get(EPILOGUE_TAG)) for n in nodes}
    placeholder_index = {n: i for i, n in enumerate(functional.graph.find_nodes(op="placeholder"))}

    # Values crossing the cut, in program order.
    crossing = [
        n
        for n in nodes
        if n is not output
        and not is_epilogue[n]
        and any(u is output or is_epilogue[u] for u in n.users)
    ]
    core_outputs = [n for n in crossing if n not in placeholder_index]
    core_index = {n: i for i, n in enumerate(core_outputs)}

    core_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in nodes:
        if n is not output and not is_epilogue[n]:
            env[n] = core_graph.node_copy(n, env.__getitem__)
    core_graph.output(tuple(_detached_if_only_detached(core_graph, env[n], n) for n in core_outputs))

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

    return SlicedProgram(
        core=fx.GraphModule(functional, core_graph),
        epilogue=fx.GraphModule(functional, epilogue_graph),
        sources=tuple(sources),
    )


def _detached_if_only_detached(graph: fx.Graph, value: fx.Node, original: fx.Node) -> fx.Node:
    """See Note [A base the epilogue only detaches]."""
    if not all(u.op == "call_function" and u.target is torch.ops.aten.detach.default for u in original.users):
        return value
    detached = graph.call_function(torch.ops.aten.detach.default, (value,))
    detached.meta = dict(value.meta)
    return detached
