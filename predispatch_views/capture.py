"""Stage 1: capture a program as a pre-dispatch ATen graph.

Pre-dispatch tracing records ops above the autograd key: the graph holds exactly the calls autograd sees in
eager (``chunk``, ``tensor_split``, ``hsplit``, ``narrow``... are not decomposed), so replaying a view node in
eager builds eager's autograd node for it. See Note [Replaying pre-dispatch views].
"""

from __future__ import annotations

import contextlib
import dis
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .fallbacks import Fallback, FallbackKind


class UnsupportedCapture(Exception):
    """The function does something a pre-dispatch trace would silently drop; ``reason`` says what."""

    def __init__(self, fallback: Fallback) -> None:
        super().__init__(fallback.reason)
        self.fallback = fallback


def capture_graph_module(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> fx.GraphModule:
    """Re-trace a Dynamo FX graph at the pre-dispatch level.

    Dynamo hands a backend real inputs and a fake mode over its ShapeEnv (in the TracingContext); fakifying
    the inputs as AOTAutograd does keeps symbols and guards consistent with Dynamo's.
    """
    fake_mode = ti.detect_fake_mode(list(example_inputs))
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    fakes = [_fake_of(p, x, fake_mode) for p, x in zip(placeholders, example_inputs)]
    ctx = fake_mode if fake_mode is not None else contextlib.nullcontext()
    with ctx:
        return ti.trace_pre_dispatch(_as_callable(gm), fakes)


def capture_limitation(gm: fx.GraphModule) -> Fallback | None:
    """Something in Dynamo's graph that pre-dispatch tracing would run but not record faithfully.

    make_fx records grad-mode and autocast changes as nodes, but an inference_mode region would silently be
    compiled with autograd on. (A custom autograd.Function, Dynamo's ``autograd_function_apply``, would be inlined,
    its backward dropped: the capture records it as one node, Note [Custom autograd.Functions in the core].)
    """
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        name = getattr(n.target, "__name__", "")
        if name == "_enter_inference_mode":
            return Fallback(
                FallbackKind.INFERENCE_MODE_IN_GRAPH,
                "an inference_mode region inside the graph (pre-dispatch tracing does not record it)",
            )
    return None


def inlined_autograd_function(gm: fx.GraphModule) -> Fallback | None:
    """A custom autograd.Function whose forward Dynamo inlined as plain code because no input required grad, in a
    call Note [An inlined Function returns its input as eager does] (_torch_internals) could not rewrite.

    Dynamo traced the forwards of the Functions the capture keeps as nodes too (Note [Custom autograd.Functions in
    the core]): those whose lines the nodes' forward graphs record are not counted. Asked after the capture, where
    a kept Function that returns an input has fallen back with its own reason."""
    kept = _frames_of_kept_forwards(gm)
    inlined = [c for c in ti.inlined_autograd_functions() if _may_return_an_input(c.forward)]
    if (inlined := [c.__qualname__ for c in inlined if not _runs_in(c.forward, kept)]) and _identity_may_show(gm):
        # Eager returns an input the forward gives back as a view of it (``view_as``), even without grad; the
        # inlined graph returns the input itself (fuzzer s52_376, where stock's output was a view for another
        # reason and matched).
        return Fallback(
            FallbackKind.INLINED_AUTOGRAD_FUNCTION,
            f"Dynamo inlined the forward of autograd.Function {', '.join(inlined)} (no input requires grad): an "
            "input it returns would be the input itself, where eager's is a view of it",
        )
    return None


def _identity_may_show(gm: fx.GraphModule) -> bool:
    """Whether the input an inlined Function returned as it is (eager: a view of it, ``view_as``) may show where
    stock's answer matches eager's. Only the Function's own result differs, and only when returned: a view taken
    of it has eager's base either way. Stock returns an intermediate as a view only after a metadata mutation
    (fuzzer s52_376); an output aliasing an input, or a written input, is left to stock too."""
    if any(_is_metadata_mutation_call(n) for n in gm.graph.nodes) or written_inputs(gm):
        return True
    inputs = {_storage(_example(p)) for p in gm.graph.find_nodes(op="placeholder")} - {None}
    outputs = [a for a in ti.tree_leaves(gm.graph.output_node().args[0]) if isinstance(a, fx.Node)]
    return any(a.op == "placeholder" or _storage(_example(a)) in inputs for a in outputs)


def _frames_of_kept_forwards(gm: fx.GraphModule) -> set[tuple[str, int]]:
    """(file, line) of every frame the forward graphs of the graph's ``autograd_function_apply`` nodes record, in
    the graph and in the bodies of its higher-order ops (a Function called inside a checkpointed region is kept in
    the region's body)."""
    frames: set[tuple[str, int]] = set()
    graphs = [m for m in gm.modules() if isinstance(m, fx.GraphModule)]
    for owner, n in (
        (g, n) for g in graphs for n in g.graph.find_nodes(op="call_function", target=ti.AUTOGRAD_FUNCTION_APPLY)
    ):
        forward = getattr(owner, str(n.args[0].target), None) if isinstance(n.args[0], fx.Node) else None
        for m in forward.graph.nodes if isinstance(forward, fx.GraphModule) else ():
            for line in (m.meta.get("stack_trace") or "").splitlines():
                filename, found, rest = line.strip().removeprefix('File "').partition('", line ')
                if found:
                    frames.add((filename, int(rest.split(",")[0])))
    return frames


def _runs_in(fn: Callable[..., Any], frames: set[tuple[str, int]]) -> bool:
    """Whether one of ``frames`` is a line of ``fn``."""
    code = getattr(fn, "__code__", None)
    lines = [line for _, _, line in code.co_lines() if line is not None] if code is not None else []
    return bool(lines) and any(f == code.co_filename and min(lines) <= k <= max(lines) for f, k in frames)


def _may_return_an_input(forward: Callable[..., Any]) -> bool:
    """Whether ``forward`` may return one of its arguments as it is: ``return x``, or any tuple (read from the
    bytecode, conservatively; ``return x.clone()`` does not)."""
    code = getattr(forward, "__code__", None)
    if code is None:
        return True
    arguments = set(code.co_varnames[: code.co_argcount])
    instructions = list(dis.get_instructions(code))
    for before, instruction in itertools.pairwise(instructions):
        if instruction.opname == "RETURN_VALUE" and (
            before.opname == "BUILD_TUPLE" or (before.opname == "LOAD_FAST" and before.argval in arguments)
        ):
            return True
    return False


def written_inputs(gm: fx.GraphModule) -> list[int]:
    """Positions of the graph's inputs whose storage an in-place call writes, through any alias.

    For Dynamo's graph (torch-level calls, example values in ``example_value``) and for a pre-dispatch capture
    (ATen calls, ``val``); both keep the real tensors' storage sharing among their example values.
    """
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    # Inputs that are no tensors (ints, SymInts, lists, None) have no storage and are never written.
    storage = {i: s for i, p in enumerate(placeholders) if (s := _storage(_example(p))) is not None}
    written = {_storage(_example(target)) for target in _written_nodes(gm)} - {None}
    return sorted(i for i, s in storage.items() if s in written)


def _written_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [target for n in gm.graph.nodes for target in _written_args(n) if isinstance(target, fx.Node)]


def _example(n: fx.Node) -> Any:
    return n.meta.get("example_value", n.meta.get("val"))


def _written_args(n: fx.Node) -> list[Any]:
    if isinstance(n.target, ti.OpOverload):
        return [target] if (target := graph_ops.mutated_input(n)) is not None else []
    name = n.target if n.op == "call_method" else getattr(n.target, "__name__", "")
    if n.op not in ("call_method", "call_function") or not isinstance(name, str) or not n.args:
        return []
    # out= is one tensor or a tuple of them (``torch.max(x, 0, out=(v, i))``): flatten either.
    written: list[Any] = ti.tree_leaves(n.kwargs.get("out"))
    if (name.endswith("_") and not name.endswith("__")) or name in _IN_PLACE_OPERATORS or n.kwargs.get("inplace"):
        written.append(n.args[0])
    return written


_IN_PLACE_OPERATORS = {"setitem", "iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior"}


def _storage(value: Any) -> ti.StorageWeakRef | None:
    return ti.storage_ref(value)


def _fake_of(placeholder: fx.Node, example: Any, fake_mode: ti.FakeTensorMode | None) -> Any:
    """Dynamo hands backends real tensors and a fresh fake mode over its ShapeEnv: fakify as AOTAutograd does."""
    if isinstance(example, torch.Tensor) and fake_mode is not None:
        return ti.fakify_like_dynamo(example, fake_mode)
    value = placeholder.meta.get("example_value")
    return value if value is not None and not isinstance(value, torch.Tensor) else example


def _as_callable(gm: fx.GraphModule) -> Callable[..., Any]:
    # Dynamo graphs return a tuple; make_fx wants a plain function of positional inputs. The interpreter, slower
    # than the generated code, only where there is a node to keep whole.
    kept = (ti.AUTOGRAD_FUNCTION_APPLY, ti.ACTIVATION_CHECKPOINT, ti.INVOKE_SUBGRAPH)
    if any(n.op == "call_function" and n.target in kept for n in gm.graph.nodes):
        return lambda *args: _KeepingCustomFunctions(gm).run(*args)
    return lambda *args: gm(*args)


class _KeepingCustomFunctions(fx.Interpreter):
    """Runs Dynamo's graph under the trace, recording each custom autograd.Function (Dynamo's
    ``autograd_function_apply``, its forward and backward as graphs) as one node.

    Note [Custom autograd.Functions in the core]
    Traced through, the Function's forward would be recorded under no_grad and its backward dropped. (Dynamo's
    activation checkpoint, ``tag_activation_checkpoint``, cannot be traced through at all; it is kept the same
    way, and AOTAutograd's partitioner recomputes its body in the backward as it does for stock.) Recorded as
    one node, it reaches the inner backend as it reaches it from stock: AOTAutograd traces the joint graph through
    the user's backward. To the rules it is an opaque differentiable op of the core whose backward may read
    anything. A forward that returns an input is not compiled at all: autograd.Function returns a view of that
    input whose grad_fn is the user's backward, and AOTAutograd would regenerate that output from the input, around
    the backward. Nor is one that marks an input dirty (``ctx.mark_dirty``: an in-place write inside the node, the
    input returned with the Function's history; ``graph_ops.DIRTY_ARGS`` names it a write). Either is marked to run
    in eager between two compiled segments instead (Note [Segments]), where Dynamo's ``autograd_function_apply``
    runs as Dynamo with ``backend="eager"`` runs it. A checkpointed region that returns an input falls back.
    ``invoke_subgraph`` (``nested_compile_region``) is inlined: AOTAutograd fails on that HOP as make_fx records it
    (torch 2.13, "outs_to_grad length (1) != tangents length (0)"), and so does stock's compile after it."""

    def call_function(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if target is ti.ACTIVATION_CHECKPOINT:  # its body is recomputed in the backward, as in stock's
            return record_custom_function(target, args, kwargs, what="a checkpointed region")
        if target is ti.INVOKE_SUBGRAPH:  # inlined: see the Note
            return _KeepingCustomFunctions(args[0]).run(*args[2:])
        if target is not ti.AUTOGRAD_FUNCTION_APPLY:
            return super().call_function(target, args, kwargs)
        return record_custom_function(target, args, kwargs, may_run_eagerly=True)  # see the Note


def record_custom_function(
    target: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    what: str = "a custom autograd.Function",
    *,
    may_run_eagerly: bool = False,
) -> Any:
    """One node for a custom autograd.Function call or a checkpointed region (Note [Custom autograd.Functions in the
    core]). One that returns an input or a view of one is, with ``may_run_eagerly`` (compile_function, which calls
    the Function's own ``apply``; the backend, which calls Dynamo's ``autograd_function_apply``), recorded as a call
    to run in eager between two compiled segments (``RUN_EAGERLY``; Note [Segments] in segments.py), and cannot be
    kept otherwise. (Under Dynamo the same forward may also have been inlined elsewhere in the graph: the traced-code
    record tells the two apart, ``ti.inlined_autograd_functions``.) One that marks an input dirty (it returns that
    input itself, written in place) cannot be kept."""
    args_leaves = _tensors((args, kwargs))
    inputs = {_storage(a) for a in args_leaves}

    def aliases_and_dirty(out: Any) -> tuple[bool, bool]:
        outs = _tensors(out)
        return any(_storage(o) in inputs for o in outs), any(o is a for o in outs for a in args_leaves)

    def dirty_positions(out: Any) -> list[int] | None:
        """The top-level arguments returned as they are (marked dirty), or None where one is nested."""
        returned = [o for o in _tensors(out) if any(o is a for a in args_leaves)]
        positions = [i for i, a in enumerate(args) if any(a is o for o in returned)]
        return positions if len(positions) == len({id(o) for o in returned}) else None

    # A checkpointed region runs its body through a higher-order op's dispatch, which no watch may see.
    run, has_effects = ti.watching_effects(target, args_leaves) if what != "a checkpointed region" else (None, None)

    def node_meta(out: Any) -> dict[str, Any]:
        aliases, dirty = aliases_and_dirty(out)
        if not (aliases and may_run_eagerly) or (dirty and dirty_positions(out) is None):
            effect_free = {graph_ops.EFFECT_FREE: True} if has_effects is not None and not has_effects() else {}
            return {graph_ops.OPAQUE_CALL: what, **effect_free}
        written = {graph_ops.DIRTY_ARGS: dirty_positions(out)} if dirty else {}
        return {graph_ops.OPAQUE_CALL: what, graph_ops.RUN_EAGERLY: what, **written}

    out = ti.record_opaque_call(target, args, kwargs, node_meta, run)
    aliases, dirty = aliases_and_dirty(out)
    if dirty and not (may_run_eagerly and dirty_positions(out)):
        raise UnsupportedCapture(
            Fallback(
                FallbackKind.AUTOGRAD_FUNCTION_IN_GRAPH,
                f"{what} marks an input dirty (an in-place write inside an op the core keeps opaque)",
            )
        )
    if aliases and not may_run_eagerly:
        raise UnsupportedCapture(
            Fallback(
                FallbackKind.AUTOGRAD_FUNCTION_RETURNS_AN_INPUT,
                f"{what} returns an input (eager returns a view of it, with its own backward; AOTAutograd would "
                "regenerate it from the input around that backward)",
            )
        )
    return out


def _tensors(out: Any) -> list[torch.Tensor]:
    return [o for o in ti.tree_leaves(out) if isinstance(o, torch.Tensor)]


def capture_function(
    flat_fn: Callable[..., Any], flat_tensors: Sequence[torch.Tensor]
) -> tuple[fx.GraphModule, ti.FakeTensorMode]:
    """Trace a plain function of tensors with static shapes (the no-Dynamo path)."""
    fake_mode = ti.FakeTensorMode()
    fakes = [fake_mode.from_tensor(t) for t in flat_tensors]
    with fake_mode:
        return ti.trace_pre_dispatch(flat_fn, fakes), fake_mode


def may_return_views_of(gm: fx.GraphModule) -> bool:
    """False only when Dynamo's example values prove no output aliases an input or another output.

    Aliasing without view-ness counts too: ``detach()`` results share storage and version counter.
    """
    if any("dropout" in _target_name(n) for n in gm.graph.nodes):
        return True  # fake dropout always allocates; eager's returns its input when p == 0 or not training
    if any(_is_metadata_mutation_call(n) for n in gm.graph.nodes):
        # AOTAutograd returns a value whose metadata was mutated (``t0.t_()``) as a view of its base, where the
        # example value (eager's) is none: the next graph would replay views of stock's view (fuzzer s1004_39).
        return True
    seen: set[ti.StorageWeakRef] = set()
    for p in gm.graph.find_nodes(op="placeholder"):
        value = p.meta.get("example_value")
        if isinstance(value, torch.Tensor):
            seen.add(ti.StorageWeakRef(value.untyped_storage()))
    for arg in fx.node.map_aggregate(gm.graph.output_node().args[0], lambda a: a) or ():
        if not isinstance(arg, fx.Node):
            continue
        value = arg.meta.get("example_value")
        if arg.op == "placeholder" or value is None:
            return True
        if isinstance(value, torch.Tensor):
            storage = ti.StorageWeakRef(value.untyped_storage())
            if ti.is_view(value) or storage in seen:
                return True
            seen.add(storage)
    return False


def writes_an_input_its_backward_reads(gm: fx.GraphModule) -> bool:
    """An in-place call of Dynamo's graph, recorded by autograd, that writes an input (or a view of one) and whose
    backward reads the value it overwrites (Note [A write to an input its own backward reads]): stock's backward
    raises there, so the graph takes the prototype's path, which runs the write in eager, even with no view output."""
    if not torch.is_grad_enabled():
        return False
    inputs = {
        ti.StorageWeakRef(v.untyped_storage())
        for p in gm.graph.find_nodes(op="placeholder")
        if isinstance(v := p.meta.get("example_value"), torch.Tensor)
    }
    for n in gm.graph.nodes:
        name, value = _target_name(n), n.meta.get("example_value")
        if not _is_inplace_call(n):
            continue
        target = n.args[0].meta.get("example_value") if n.args and isinstance(n.args[0], fx.Node) else None
        if not (isinstance(value, torch.Tensor) and value.requires_grad and isinstance(target, torch.Tensor)):
            continue
        if ti.StorageWeakRef(target.untyped_storage()) in inputs:
            # The out-of-place call's backward reads what the write's reads: its first argument is the target.
            op = getattr(torch.Tensor if n.op == "call_method" else torch, name[:-1], None)
            args, kwargs = fx.node.map_aggregate((n.args, n.kwargs), graph_ops.example_value)
            reads = ti.backward_reads(op, args, kwargs) if callable(op) else None
            if reads is None or 0 in reads.inputs:
                return True
    return False


def _is_metadata_mutation_call(n: fx.Node) -> bool:
    """``t_``, ``transpose_``, ``unsqueeze_``... in Dynamo's graph (torch tags their ATen ops ``inplace_view``)."""
    name = _target_name(n)
    if not _is_inplace_call(n):
        return False
    if name in ("resize_", "resize_as_"):  # a storage change: stock's answer either way (STORAGE_CHANGE)
        return False
    return ti.is_inplace_view_op_name(name)


def _is_inplace_call(n: fx.Node) -> bool:
    """A torch-level in-place call of Dynamo's graph (``x.mul_(w)``, ``torch.relu_(x)``), by its name."""
    name = _target_name(n)
    return n.op in ("call_method", "call_function") and name.endswith("_") and not name.endswith("__")


def _target_name(n: fx.Node) -> str:
    return n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
