"""Stage 2b: view-preserving functionalization.

Input: the pre-dispatch graph and the epilogue selection (analysis.py). Output: two graphs with the same
epilogue, the selected nodes copied unchanged and tagged ``node.meta[EPILOGUE_TAG]`` (the user's own ``unbind``,
``chunk``, ``split_with_sizes``... with their getitems, in the subset and order the program returns them):
- ``functional``: the core functionalized at the pre-dispatch level: mutations of intermediates are gone, a
  mutated graph input gets a trailing ``copy_``. Stock functionalization would instead regenerate each output
  view from its base (one ``unbind`` per output, ``chunk`` turned into ``split``); protecting the selected nodes
  from it is the whole trick.
- ``executable``: what runs; its core keeps the user's mutations (Note [The compiled core keeps the user's
  mutations]). Without mutations in the core the two graphs are the same graph.

Note [The compiled core keeps the user's mutations]
Functionalizing at the pre-dispatch level rewrites ops *above* autograd, which changes what autograd records
and saves: ``y = x.sigmoid(); y.mul_(2)`` loses eager's "modified by an inplace operation" backward error;
training batch_norm's functional form saves the running stats that its trailing ``copy_`` then bumps; a
mutation under ``no_grad`` becomes a visible ``copy_``. So the core handed to the inner backend is the
unfunctionalized core, and AOTAutograd functionalizes it *below* autograd, exactly as it does for stock; its
input mutations are applied by AOTAutograd's runtime before the epilogue views the inputs. The functional graph
is what that functionalization produces, with the user's views preserved: explain() shows it.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .analysis import EpilogueSelection

EPILOGUE_TAG = "predispatch_views_epilogue"
aten = torch.ops.aten


@dataclass
class FunctionalizedProgram:
    executable: fx.GraphModule  # what runs: the epilogue after a core that keeps the user's mutations
    core: fx.GraphModule
    source: fx.GraphModule
    selection: EpilogueSelection

    @functools.cached_property
    def functional(self) -> fx.GraphModule:
        """The view-preserving functional graph, for explain() only: functionalizing a core that mutates is one
        more trace, so it is built when first asked for, never on the compile path."""
        if not any(graph_ops.mutated_input(n) is not None for n in self.core.graph.nodes):
            return self.executable
        return _append_epilogue(_functionalize(self.core), self.source, self.selection)


def functionalize_preserving_views(gm: fx.GraphModule, selection: EpilogueSelection) -> FunctionalizedProgram:
    core = _core_graph(gm, selection)
    return FunctionalizedProgram(_append_epilogue(core, gm, selection), core, gm, selection)


def _core_graph(gm: fx.GraphModule, selection: EpilogueSelection) -> fx.GraphModule:
    """The non-functional core: every node not replayed in eager; it returns the externals."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in gm.graph.nodes:
        if n.op == "output" or (n in selection.epilogue and n not in selection.duplicated):
            continue
        if n in selection.duplicated and graph_ops.is_input_returned_by_a_fresh_op(n):
            # Eager's readers read the input itself (Note [Ops that return their input]); a copy in the core would
            # be AOTAutograd's decomposition, a clone, and the compiled backward would save the clone, which the
            # user's writes to the replayed result (the input) never bump (T5's encoder output, issue 21 class 4).
            env[n] = env[n.args[0]]  # type: ignore[index]
            continue
        env[n] = graph.node_copy(n, env.__getitem__)
        if n in selection.epilogue and graph_ops.mutated_input(n) is not None:
            # The epilogue replays the in-place call on the core's (unmutated) base; the core only needs the
            # resulting value, which the out-of-place form computes without touching the base.
            env[n].target = graph_ops.out_of_place(n.target)
    graph.output(tuple(env[n] for n in selection.externals))
    # Note [Bases the compiled backward must not save] in output_rules.py
    ti.mark_must_recompute(env[n] for n in selection.recompute if n in env)
    return fx.GraphModule(gm, graph)


def _functionalize(core: fx.GraphModule) -> fx.GraphModule:
    """Functionalize at the pre-dispatch level; input mutations come back as trailing copy_ nodes."""
    placeholders = list(core.graph.find_nodes(op="placeholder"))
    values = [p.meta["val"] for p in placeholders]
    fake_mode = ti.detect_fake_mode(values)
    mutated: list[int] = []

    def functional(*args: Any) -> list[Any]:
        f_args = [ti.to_fun(a) for a in args]
        outs = core(*f_args)
        mutated[:] = [i for i, a in enumerate(f_args) if isinstance(a, torch.Tensor) and ti.has_data_mutation(a)]
        return [ti.from_fun(o) for o in outs] + [ti.from_fun(f_args[i]) for i in mutated]

    with (
        fake_mode if fake_mode is not None else contextlib.nullcontext(),
        ti.enable_python_dispatcher(),
        ti.FunctionalTensorMode(pre_dispatch=True),
    ):
        traced = ti.trace_pre_dispatch(functional, values)

    graph = traced.graph
    output = graph.output_node()
    results = list(output.args[0])
    n_outs = len(results) - len(mutated)
    new_placeholders = list(graph.find_nodes(op="placeholder"))
    with graph.inserting_before(output):
        for i, value in zip(mutated, results[n_outs:]):
            graph.call_function(aten.copy_.default, (new_placeholders[i], value))
    output.args = (tuple(results[:n_outs]),)
    graph.eliminate_dead_code()
    for p, old in zip(new_placeholders, placeholders):
        p.meta = dict(old.meta)
    traced.recompile()
    return traced


def _append_epilogue(core: fx.GraphModule, gm: fx.GraphModule, selection: EpilogueSelection) -> fx.GraphModule:
    """Core nodes, then the selected nodes copied verbatim and tagged, then the program's outputs."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    core_output = core.graph.output_node()
    for n in core.graph.nodes:
        if n is not core_output:
            env[n] = graph.node_copy(n, env.__getitem__)
    for old, new in zip(gm.graph.find_nodes(op="placeholder"), core.graph.find_nodes(op="placeholder")):
        env[old] = env[new]
    for old, value in zip(selection.externals, core_output.args[0]):
        env[old] = env[value] if isinstance(value, fx.Node) else value
    for old, placeholder in selection.resolved.items():
        env[old] = env[placeholder]
    for n in gm.graph.nodes:
        if n in selection.epilogue:
            env[n] = graph.node_copy(n, env.__getitem__)
            env[n].meta[EPILOGUE_TAG] = True
    graph.output(fx.map_arg(gm.graph.output_node().args[0], env.__getitem__))
    return ti.lazy_graph_module(core, graph)  # only sliced: its code is generated if explain() prints it
