"""``compile_function``: compile a plain function or an nn.Module without Dynamo (like functorch's aot_function
and aot_module).

Inputs and outputs may be any pytree of tensors and constants (a ``torch.Size`` stays a ``torch.Size``). A new
trace is made whenever the input metadata changes (structure, constants, shape, stride, dtype, device,
requires_grad, grad and inference mode, and which inputs alias each other), or the metadata of a lifted tensor or the
``training`` flag of a module the function owns changes; shapes are static.

Tensors the function reads without receiving them (a module's parameters and buffers, closed-over or global
tensors) become inputs of the compiled program (Note [Lifting closed-over tensors] in capture.py): training
through ``compile_function(module)`` puts ``.grad`` on the module's parameters. A module's own state (the module
compiled, a module bound to a method, or one the function closes over or names as a global) is looked up by
name on every call, as functional_call does, so replacing ``module.weight`` is seen; any other closed-over
tensor is passed by identity (rebinding the Python name is not seen).

Outputs keep eager's identities: an output that is an input (``return x``, ``x.add_(1)``) is that input, a
tensor returned twice is one object. Inputs the function does not use are not inputs of the compiled program
(their ``.grad`` stays None, as in eager).

Note [compile_function falls back to eager]
A function the prototype cannot compile faithfully runs eagerly: eager's behaviour exactly, with the reason
logged and kept in FALLBACKS. That covers a function the trace cannot record faithfully (Note [What the trace
cannot record]: custom autograd.Functions, requires_grad_, hooks, a backward pass inside), one that fails to
trace or whose compilation fails (AOTAutograd runs the backward while tracing and raises eager's *backward*
error in forward), and one the pipeline will not replay (``resize_``, a random in-place op after the views...).
The backend hands the last kind to stock AOTAutograd through Dynamo, which graph-breaks where it must; stock
AOTAutograd on the whole captured function has no graph breaks, and the fuzzer found it crashing or silently
wrong where Dynamo's stock is right (aliased inputs written in place, random ops, metadata mutations), so
eager is the faithful answer. ``strict=True`` raises instead: StrictModeError with the reason, or the trace's
or the compiler's own error.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn

from . import _torch_internals as ti
from . import graph_ops
from .capture import UnsupportedCapture, written_inputs
from .fallbacks import Fallback, FallbackKind
from .function_capture import FunctionCapture, capture_closure
from .graph_meta import graph_meta
from .labels import LABEL_KEY, function_label
from .module_state import getter, module_state, owned_modules, restore_module_state, training_flags
from .pipeline import FALLBACKS, CompiledProgram, InnerBackend, StrictModeError, compile_captured, input_alias_groups
from .runtime import restricted_view_aliasing

log = logging.getLogger("predispatch_views")


def _is_leaf(value: Any) -> bool:
    return isinstance(value, torch.Size)  # pytree would unflatten a Size into a plain tuple


# Where each output leaf comes from: the compiled program's k-th result, the k-th tensor input (user inputs
# then lifted tensors, before pruning), or a constant of the trace.
@dataclass(frozen=True)
class _FromProgram:
    index: int


@dataclass(frozen=True)
class _FromInput:
    index: int


@dataclass(frozen=True)
class _Constant:
    value: Any


_Source = _FromProgram | _FromInput | _Constant


@dataclass
class _Entry:
    """One trace: how to feed the compiled program and rebuild the function's outputs."""

    out_spec: ti.TreeSpec | None = None
    program: CompiledProgram | None = None
    eager_reason: str | None = None  # set: run the function eagerly (Note [compile_function falls back to eager])
    used: list[int] = field(default_factory=list)  # positions (user tensors, then lifted) the program takes
    lifted: list[Callable[[], torch.Tensor | None]] = field(default_factory=list)
    lifted_key: tuple[Hashable, ...] = ()
    sources: list[_Source] = field(default_factory=list)

    def lifted_tensors(self) -> list[torch.Tensor] | None:
        values = [get() for get in self.lifted]
        return None if any(v is None for v in values) else values  # type: ignore[return-value]


def compile_function(
    fn: Callable[..., Any], inner: InnerBackend = "aot_eager", *, strict: bool = False
) -> Callable[..., Any]:
    """Compile ``fn`` (a function or an nn.Module) with the prototype, without Dynamo.

    inner: the backend that compiles the core ("aot_eager", "inductor", "eager", or a backend callable).
    strict: raise instead of falling back (to stock AOTAutograd or to eager).
    """
    # One entry per input key; an entry whose lifted tensors changed (a frozen parameter, a replaced buffer of
    # another shape) is replaced by a new trace.
    cache: dict[Hashable, _Entry] = {}
    owners = owned_modules(fn)

    def compiled(*args: Any, **kwargs: Any) -> Any:
        flat, in_spec = ti.tree_flatten((args, kwargs), is_leaf=_is_leaf)
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        key = (
            in_spec,
            torch.is_grad_enabled(),
            torch.is_inference_mode_enabled(),
            _metadata_key(flat),
            training_flags(owners),
        )
        entry = cache.get(key)
        lifted = None
        if entry is not None and entry.eager_reason is None:
            lifted = entry.lifted_tensors()
            # Without lifted tensors ``key`` already says everything ``lifted_key`` would.
            if lifted is None or (lifted and _metadata_key(tensors + lifted) != entry.lifted_key):
                entry = None
        if entry is None:
            # Tracing and compiling must not draw from the caller's RNG (found by the fuzzer: the first call's
            # random ops differed from eager's).
            with torch.random.fork_rng(devices=[]):
                entry = cache[key] = _compile(fn, owners, flat, in_spec, inner, strict)
            lifted = entry.lifted_tensors()
        if entry.eager_reason is not None:
            return fn(*args, **kwargs)
        assert lifted is not None
        return _run(entry, tensors + lifted)

    compiled.cache = cache  # type: ignore[attr-defined]
    return functools.wraps(fn)(compiled) if not isinstance(fn, nn.Module) else compiled


def _run(entry: _Entry, tensors: list[torch.Tensor]) -> Any:
    assert entry.program is not None and entry.out_spec is not None
    results = entry.program.run(*(tensors[i] for i in entry.used))
    leaves = []
    for source in entry.sources:
        if isinstance(source, _FromProgram):
            leaves.append(results[source.index])
        elif isinstance(source, _FromInput):
            leaves.append(tensors[source.index])
        else:
            leaves.append(source.value)
    return ti.tree_unflatten(leaves, entry.out_spec)


def _compile(
    fn: Callable[..., Any],
    owners: list[tuple[str, nn.Module]],
    flat: list[Any],
    in_spec: ti.TreeSpec,
    inner: InnerBackend,
    strict: bool,
) -> _Entry:
    tensor_positions = [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]
    out_specs: list[ti.TreeSpec] = []
    out_leaves: list[Any] = []

    def flat_fn(*tensors: torch.Tensor) -> list[Any]:
        values = list(flat)
        for i, t in zip(tensor_positions, tensors):
            values[i] = t
        args, kwargs = ti.tree_unflatten(values, in_spec)
        leaves, spec = ti.tree_flatten(fn(*args, **kwargs), is_leaf=_is_leaf)
        out_specs[:] = [spec]
        out_leaves[:] = leaves
        return [v for v in leaves if isinstance(v, torch.Tensor)]

    tensors = [flat[i] for i in tensor_positions]
    if layouts := sorted({str(t.layout) for t in tensors if t.layout != torch.strided}):
        message = f"an input of layout {', '.join(layouts)}: the capture traces strided tensors"
        return _eager(fn, Fallback(FallbackKind.NON_STRIDED_INPUT, message), strict, None)
    state = module_state(owners)
    try:
        capture = capture_closure(flat_fn, tensors)
    except UnsupportedCapture as e:
        return _eager(fn, e.fallback, strict, None)
    except Exception as e:  # the program cannot be traced: eager raises its own error, or runs
        message = f"the pre-dispatch capture failed: {type(e).__name__}: {e}"
        return _eager(fn, Fallback(FallbackKind.CAPTURE_FAILED, message), strict, e)
    finally:
        rebound = restore_module_state(owners, state)
    if rebound:
        message = f"the function rebinds {rebound} (a traced value would be kept)"
        return _eager(fn, Fallback(FallbackKind.REBINDS_MODULE_STATE, message), strict, None)

    _mark_input_metadata_mutations(capture.graph, tensors + capture.lifted)

    entry = _Entry(out_spec=out_specs[0])
    entry.lifted = [getter(t, owners, state) for t in capture.lifted]
    entry.lifted_key = _metadata_key(tensors + capture.lifted)
    entry.sources = _output_sources(capture, out_leaves)
    entry.used = _prune_unused_inputs(capture.graph)
    example = [(tensors + capture.lifted)[i] for i in entry.used]
    capture.graph.meta[LABEL_KEY] = function_label(fn)
    if (k := restricted_view_aliasing(example, written_inputs(capture.graph))) is not None:
        restricted = Fallback(
            FallbackKind.RESTRICTED_VIEW_WRITTEN_IN_FUNCTION,
            f"input {entry.used[k]} is a view autograd forbids rebasing, and the function writes an alias of it (Note "
            "[A restricted view aliased by a write] in runtime.py)",
        )
        return _eager(fn, restricted, strict, None)
    try:
        entry.program = compile_captured(capture.graph, example, inner, strict=strict, stock_fallback=False)
    except StrictModeError:
        raise
    except Exception as e:
        message = f"compiling the captured graph failed: {type(e).__name__}: {e}"
        return _eager(fn, Fallback(FallbackKind.CAPTURED_GRAPH_COMPILE_FAILED, message), strict, e)
    if entry.program.fallback is not None:
        return _eager(fn, entry.program.fallback, strict, None)
    return entry


def _eager(fn: Callable[..., Any], fallback: Fallback, strict: bool, error: Exception | None) -> _Entry:
    if strict:
        if error is not None:
            raise error
        raise StrictModeError(fallback.reason)
    log.info("compile_function runs the function eagerly: %s", fallback.reason)
    FALLBACKS.append((function_label(fn), fallback.reason))
    return _Entry(eager_reason=fallback.reason)


def _output_sources(capture: FunctionCapture, leaves: list[Any]) -> list[_Source]:
    """Map each output leaf to where it comes from, keeping eager's object identities.

    An output that *is* an input object (``return x``, ``x.add_(1)``, ``x.requires_grad_()``) is returned as the
    real input, and a tensor returned twice as the program's first result for it: the epilogue would return
    the same objects, but stock AOTAutograd (a fallback) returns fresh aliases. The graph keeps all its outputs.
    """
    returned = list(capture.graph.graph.output_node().args[0])
    placeholders = list(capture.graph.graph.find_nodes(op="placeholder"))
    input_ids = {id(f): i for i, f in enumerate(capture.inputs)}
    first: dict[int, int] = {}
    sources: list[_Source] = []
    k = 0
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            sources.append(_Constant(leaf))
            continue
        root = _returned_input(returned[k])
        if id(leaf) in input_ids:
            sources.append(_FromInput(input_ids[id(leaf)]))
        elif root is not None:  # a lifted tensor, returned (or mutated in place and returned)
            sources.append(_FromInput(placeholders.index(root)))
        else:
            sources.append(_FromProgram(first.setdefault(id(leaf), k)))
        k += 1
    return sources


def _mark_input_metadata_mutations(gm: fx.GraphModule, example: list[torch.Tensor]) -> None:
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
    meta = graph_meta(
        gm,
        grad_enabled=torch.is_grad_enabled(),
        input_alias_groups=input_alias_groups(example),
        input_requires_grad=[t.requires_grad for t in example],
    )
    nodes, root, requires_grad = meta.nodes, meta.root, meta.requires_grad
    _mark_overlapping_writes(nodes, root)
    mutated: dict[fx.Node, fx.Node] = {}  # input root -> its first metadata mutation
    for n in nodes:
        if graph_ops.is_metadata_mutation(n) and not graph_ops.is_storage_mutation(n):
            if (target := _returned_input(n)) is not None:
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
                n.meta[graph_ops.RUN_EAGERLY] = f"{graph_ops.op_name(n)} writes {w}, which overlaps its input {r}"
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


def _returned_input(node: fx.Node) -> fx.Node | None:
    """The placeholder ``node`` is, following in-place calls (which return their first argument)."""
    while node.op != "placeholder":
        target = graph_ops.mutated_input(node)
        if target is None:
            return None
        node = target
    return node


def _prune_unused_inputs(gm: fx.GraphModule) -> list[int]:
    """Drop placeholders nothing reads; return the positions of the ones kept."""
    used = []
    for i, p in enumerate(list(gm.graph.find_nodes(op="placeholder"))):
        if p.users:
            used.append(i)
        else:
            gm.graph.erase_node(p)
    gm.recompile()
    return used


def _metadata_key(flat: list[Any]) -> tuple[Hashable, ...]:
    storages: dict[ti.StorageWeakRef, int] = {}
    key: list[Hashable] = []
    for a in flat:
        if isinstance(a, torch.Tensor) and a.layout != torch.strided:  # sparse: no storage, no strides
            key.append((a.layout, tuple(a.shape), a.dtype, a.device, a.requires_grad))
        elif isinstance(a, torch.Tensor):
            storage = storages.setdefault(ti.StorageWeakRef(a.untyped_storage()), len(storages))
            key.append(
                (
                    tuple(a.shape),
                    a.stride(),
                    a.storage_offset(),
                    a.dtype,
                    a.device,
                    a.layout,
                    a.requires_grad,
                    a.is_leaf,
                    ti.is_view(a) and ti.is_restricted_view(a),
                    storage,
                )
            )
        else:
            key.append((type(a), a if isinstance(a, Hashable) else id(a)))
    return tuple(key)
