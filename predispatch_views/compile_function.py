"""``compile_function``: compile a plain function or an nn.Module without Dynamo (like functorch's aot_function
and aot_module).

Inputs and outputs may be any pytree of tensors and constants (a ``torch.Size`` stays a ``torch.Size``). A new
trace is made whenever the input metadata changes (structure, constants, shape, stride, dtype, device,
requires_grad, grad and inference mode, and which inputs alias each other), or the metadata of a lifted tensor or the
``training`` flag of a module the function owns changes; shapes are static unless ``dynamic=True`` (a new
shape then traces again only where it breaks the trace's shape guards).

Tensors the function reads without receiving them (a module's parameters and buffers, closed-over or global
tensors) become inputs of the compiled program (Note [Lifting closed-over tensors] in capture.py): training
through ``compile_function(module)`` puts ``.grad`` on the module's parameters. A module's own state (the module
compiled, a module bound to a method, or one the function closes over or names as a global) is looked up by
name on every call, as functional_call does, so replacing ``module.weight`` is seen; any other closed-over
tensor is passed by identity (rebinding the Python name is not seen).

Outputs keep eager's identities: an output that is an input (``return x``, ``x.add_(1)``) is that input, a
tensor returned twice is one object. Inputs the function does not use are not inputs of the compiled program
(their ``.grad`` stays None, as in eager).

Called inside an enclosing trace (another ``compile_function``'s capture, make_fx, AOTAutograd, Dynamo), the
compiled function runs its function's code: the enclosing trace records the whole program, as Dynamo inlines a
nested ``torch.compile`` (compiling inside the trace would read the generator's state and fake tensors).

Note [compile_function with symbolic sizes]
``dynamic=True`` traces as ``aot_function(dynamic=True)`` does: every size of a tensor input is a symbol of one
shape environment (equal sizes share one, 0 and 1 are specialized, as under Dynamo), and lifted tensors keep their
static sizes. The core is compiled on those symbolic fakes, so the inner backend compiles it for every size; the
epilogue replays the views with the call's own sizes, and a symbolic size the function returns (``x.shape``) is a
result of the program. The trace and the compile leave guards on the symbols (a size the program branched on, a
specialized 1): a call whose inputs satisfy them reuses that trace, any other traces again (aot_function checks
none and reuses its first trace). A fallback to eager is decided for its exact sizes.

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
import itertools
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn

from . import _torch_internals as ti
from ._torch_internals.tracing import under_a_trace
from .capture import UnsupportedCapture, written_inputs
from .fallbacks import Fallback, FallbackKind
from .function_capture import FunctionCapture, capture_closure
from .function_rules import mark_calls_to_run_eagerly, metadata_mutation_of_a_returned_input, returned_input
from .labels import LABEL_KEY, function_label
from .module_state import getter, module_state, owned_modules, restore_module_state, training_flags
from .pipeline import FALLBACKS, CompiledProgram, InnerBackend, StrictModeError, compile_captured
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


@dataclass(frozen=True)
class _Size:  # a torch.Size with symbolic sizes: each a result of the program or a constant
    parts: tuple[_FromProgram | _Constant, ...]


_Source = _FromProgram | _FromInput | _Constant | _Size


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
    fits: Callable[[list[torch.Tensor]], bool] | None = None  # dynamic: whether inputs satisfy the trace's guards

    def lifted_tensors(self) -> list[torch.Tensor] | None:
        values = [get() for get in self.lifted]
        return None if any(v is None for v in values) else values  # type: ignore[return-value]


def compile_function(
    fn: Callable[..., Any], inner: InnerBackend = "aot_eager", *, strict: bool = False, dynamic: bool = False
) -> Callable[..., Any]:
    """Compile ``fn`` (a function or an nn.Module) with the prototype, without Dynamo.

    inner: the backend that compiles the core ("aot_eager", "inductor", "eager", or a backend callable).
    strict: raise instead of falling back (to stock AOTAutograd or to eager).
    dynamic: trace the inputs' sizes as symbols, as ``aot_function(dynamic=True)`` does (Note [compile_function
    with symbolic sizes]).
    """
    # One entry per input key (with ``dynamic``, several, each with its shape guard); an entry whose lifted tensors
    # changed (a frozen parameter, a replaced buffer of another shape) is replaced by a new trace.
    cache: dict[Hashable, _Entry] = {}
    owners = owned_modules(fn)

    def compiled(*args: Any, **kwargs: Any) -> Any:
        flat, in_spec = ti.tree_flatten((args, kwargs), is_leaf=_is_leaf)
        if under_a_trace(flat):
            # Called inside an enclosing trace (compile_function of a function calling this one, make_fx,
            # Dynamo): the enclosing trace records the function itself and compiles the whole program.
            return fn(*args, **kwargs)
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        unsized = len(flat) if dynamic else 0
        inputs_key = (in_spec, torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        base = (*inputs_key, _metadata_key(flat, unsized), training_flags(owners))
        key, entry = base, cache.get(base)
        for n in itertools.count() if dynamic else ():  # the first trace whose guards the inputs satisfy
            key, entry = (base, n), cache.get((base, n))
            if entry is None or entry.fits is None or entry.fits(tensors):
                break
        lifted = None
        if entry is not None and entry.eager_reason is None:
            lifted = entry.lifted_tensors()
            # Without lifted tensors ``key`` already says everything ``lifted_key`` would.
            unsized = len(tensors) if dynamic else 0
            if lifted is None or (lifted and _metadata_key(tensors + lifted, unsized) != entry.lifted_key):
                entry = None
        if entry is None:
            # Tracing and compiling must not draw from the caller's RNG (found by the fuzzer: the first call's
            # random ops differed from eager's).
            with torch.random.fork_rng(devices=[]):
                entry = cache[key] = _compile(fn, owners, flat, in_spec, inner, strict, dynamic)
            if dynamic and entry.eager_reason is not None:  # a fallback holds for these exact sizes only
                exact = _metadata_key(tensors)
                entry.fits = lambda ts: _metadata_key(ts) == exact
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
        elif isinstance(source, _Size):
            leaves.append(
                torch.Size(results[p.index] if isinstance(p, _FromProgram) else p.value for p in source.parts)
            )
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
    dynamic: bool = False,
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
        return [v for leaf in leaves for v in _program_values(leaf)]

    tensors = [flat[i] for i in tensor_positions]
    if layouts := sorted({str(t.layout) for t in tensors if t.layout != torch.strided}):
        message = f"an input of layout {', '.join(layouts)}: the capture traces strided tensors"
        return _eager(fn, Fallback(FallbackKind.NON_STRIDED_INPUT, message), strict, None)
    state = module_state(owners)
    try:
        capture = capture_closure(flat_fn, tensors, dynamic=dynamic)
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

    if (reason := metadata_mutation_of_a_returned_input(capture.graph)) is not None:
        return _eager(fn, Fallback(FallbackKind.UNFAITHFUL_TRACE_IN_FUNCTION, reason), strict, None)
    mark_calls_to_run_eagerly(capture.graph, tensors + capture.lifted)

    entry = _Entry(out_spec=out_specs[0])
    entry.lifted = [getter(t, owners, state) for t in capture.lifted]
    entry.lifted_key = _metadata_key(tensors + capture.lifted, len(tensors) if dynamic else 0)
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
    if dynamic:  # Note [compile_function with symbolic sizes]
        lifted_fakes = [capture.fake_mode.from_tensor(t, static_shapes=True) for t in capture.lifted]
        example = [(capture.inputs + lifted_fakes)[i] for i in entry.used]
    try:
        entry.program = compile_captured(capture.graph, example, inner, strict=strict, stock_fallback=False)
    except StrictModeError:
        raise
    except Exception as e:
        message = f"compiling the captured graph failed: {type(e).__name__}: {e}"
        return _eager(fn, Fallback(FallbackKind.CAPTURED_GRAPH_COMPILE_FAILED, message), strict, e)
    if entry.program.fallback is not None:
        return _eager(fn, entry.program.fallback, strict, None)
    if dynamic:  # after the compile, whose own guards count too
        entry.fits = ti.shape_guard(capture.fake_mode, capture.inputs)
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
        if isinstance(leaf, torch.Size) and _program_values(leaf):
            parts = [_Constant(e) if not _is_symbolic(e) else _FromProgram(k + j) for j, e in enumerate(leaf)]
            sources.append(_Size(tuple(parts)))
            k += len(_program_values(leaf))
            continue
        if _is_symbolic(leaf):
            sources.append(_FromProgram(k))
            k += 1
            continue
        if not isinstance(leaf, torch.Tensor):
            sources.append(_Constant(leaf))
            continue
        root = returned_input(returned[k])
        if id(leaf) in input_ids:
            sources.append(_FromInput(input_ids[id(leaf)]))
        elif root is not None:  # a lifted tensor, returned (or mutated in place and returned)
            sources.append(_FromInput(placeholders.index(root)))
        else:
            sources.append(_FromProgram(first.setdefault(id(leaf), k)))
        k += 1
    return sources


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


def _is_symbolic(value: Any) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _program_values(leaf: Any) -> list[Any]:
    """What of an output leaf the compiled program returns: a tensor, a symbolic size, or a Size's symbolic sizes."""
    if isinstance(leaf, torch.Tensor) or _is_symbolic(leaf):
        return [leaf]
    return [e for e in leaf if _is_symbolic(e)] if isinstance(leaf, torch.Size) else []


def _metadata_key(flat: list[Any], unsized: int = 0) -> tuple[Hashable, ...]:
    """What a trace assumed of its inputs; the first ``unsized`` ones' sizes, strides and offsets left out (their
    shape guard checks them: Note [compile_function with symbolic sizes])."""
    storages: dict[ti.StorageWeakRef, int] = {}
    key: list[Hashable] = []
    for i, a in enumerate(flat):
        if isinstance(a, torch.Tensor) and a.layout != torch.strided:  # sparse: no storage, no strides
            key.append((a.layout, tuple(a.shape), a.dtype, a.device, a.requires_grad))
        elif isinstance(a, torch.Tensor):
            storage = storages.setdefault(ti.StorageWeakRef(a.untyped_storage()), len(storages))
            key.append(
                (
                    *((a.dim(),) if i < unsized else (tuple(a.shape), a.stride(), a.storage_offset())),
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
