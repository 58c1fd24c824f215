"""Every private torch API the project relies on, in one place.

A torch upgrade should only need changes here. ``CHECKED_ON`` below names, per API, the torch releases it was
checked on (Note [Private APIs per torch release]); the supported range is in _torch_support.py.
Each entry of ``CHECKED_ON`` names one private API the engine relies on and why where the name does not say; the
engine's other modules reach torch's internals only through these names (tests/test_engine_layout.py checks it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch._functorch.config as functorch_config
import torch.utils._pytree as pytree
from torch._dispatch.python import enable_python_dispatcher
from torch._functorch._aot_autograd.functional_utils import (
    from_fun,
    has_data_mutation,
    to_fun,
)
from torch._guards import detect_fake_mode
from torch._ops import HigherOrderOperator, OpOverload, OpOverloadPacket
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch._subclasses.functional_tensor import FunctionalTensorMode
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.experimental.proxy_tensor import make_fx
from torch.multiprocessing.reductions import StorageWeakRef

__all__ = [
    "ACTIVATION_CHECKPOINT", "AUTOGRAD_FUNCTION_APPLY", "CHECKED_ON", "DYNAMO_RESTARTS", "INVOKE_SUBGRAPH",
    "SET_GRAD_ENABLED", "FakeTensor", "FakeTensorMode", "FunctionalTensorMode", "HigherOrderOperator", "OpOverload",
    "OpOverloadPacket", "StorageWeakRef", "TreeSpec", "as_strided_output_regeneration", "autocast_region_markers",
    "compile_caches_disabled", "compile_caches_enabled", "compile_counters", "compiled_autograd",
    "compiled_autograd_configured", "compiling_a_compiled_autograd_graph", "detect_fake_mode",
    "enable_python_dispatcher", "ends_at_graph_break", "eval_dropout_is_traced_as_its_input", "from_fun",
    "has_data_mutation", "inductor_compile_fx", "inductor_wrapper_class", "is_restricted_view", "is_view",
    "lazy_graph_module", "lookup_backend", "make_fx", "multi_output_view_optimization_disabled", "overload_packet",
    "record_opaque_call", "schema_of", "slice_output_regeneration", "starts_after_graph_break", "stock_aot_function",
    "storage_id", "storage_ref", "to_fun", "torch_function_disabled", "trace_pre_dispatch", "tree_flatten",
    "tree_leaves", "tree_map_only", "tree_unflatten", "two_tensor_class", "watching_effects",
]  # fmt: skip

SET_GRAD_ENABLED = torch._C._set_grad_enabled
tree_leaves = pytree.tree_leaves
tree_map_only = pytree.tree_map_only
tree_flatten = pytree.tree_flatten
tree_unflatten = pytree.tree_unflatten
TreeSpec = pytree.TreeSpec
AUTOGRAD_FUNCTION_APPLY = torch.ops.higher_order.autograd_function_apply
ACTIVATION_CHECKPOINT = torch.ops.higher_order.tag_activation_checkpoint
INVOKE_SUBGRAPH = torch.ops.higher_order.invoke_subgraph  # torch.compiler.nested_compile_region
# Note [Dynamo's restarts]
# Dynamo raises RestartAnalysis (and its subclasses, e.g. TensorifyScalarRestartAnalysis from a backend's
# compile under dynamic shapes) to trace the frame again; it is control flow, not a failure. The pipeline's
# guards let it through instead of counting it as an engine error or a core that fails to compile.
DYNAMO_RESTARTS: tuple[type[BaseException], ...] = (torch._dynamo.exc.RestartAnalysis,)

# Note [Private APIs per torch release]
# Each private API above, and the torch releases it was checked on: the test suite passes on the release (the
# tests exercise every entry), and the API's signature and behaviour were compared between the releases' sources.
# A new release: run the suite on it, read what changed in these APIs, add a shim here keyed on the version or on
# the feature where one moved, then add the release to each entry and to _torch_support.CHECKED_RELEASES.
# Differences found between 2.13.0 and 2.14.1, none needing a shim: make_fx gained ``dynamic_shapes=None``;
# FunctionalTensorMode gained ``_keep_input_mutations=True`` (2.13's behaviour); the runtime wrappers' code
# generation was rewritten but still binds ``runtime_wrappers.gen_alias_from_base`` by name when it compiles.
# One behaviour change shows in stock, not in the engine: AOTAutograd's dropout decomposition in eval mode returns
# its input instead of a clone (eval_dropout_is_traced_as_its_input below; design/02).
_BOTH = ("2.13.0", "2.14.1")
CHECKED_ON: dict[str, tuple[str, ...]] = {
    "torch.fx.experimental.proxy_tensor.make_fx(pre_dispatch=True, record_module_stack=True)": _BOTH,
    "torch._subclasses.functional_tensor.FunctionalTensorMode(pre_dispatch=True), FunctionalTensor (tracing.py)": _BOTH,
    "torch._functorch._aot_autograd.functional_utils: to_fun, from_fun, has_data_mutation": _BOTH,
    "torch._dispatch.python.enable_python_dispatcher": _BOTH,
    "torch._guards.detect_fake_mode": _BOTH,
    "torch._ops: OpOverload, OpOverloadPacket, HigherOrderOperator (isinstance checks)": _BOTH,
    "torch._subclasses.fake_tensor: FakeTensor, FakeTensorMode(allow_non_fake_inputs=True), from_tensor": _BOTH,
    "torch._dynamo.backends.registry: lookup_backend, register_backend, _COMPILER_FNS, _BACKENDS, "
    "_discover_entrypoint_backends": _BOTH,
    "torch._guards.TracingContext: try_get, tensor_to_context, get_traced_code": _BOTH,
    "torch.fx.experimental.proxy_tensor.make_fx(tracing_mode='real') of an op and its autograd.grad, meta-device "
    "inputs, under torch._subclasses.fake_tensor.unset_fake_temporarily (saved_for_backward.py)": _BOTH,
    "autograd nodes' _saved_* attributes and next_functions, on meta tensors (eager_saved_inputs)": _BOTH,
    "torch._debug_has_internal_overlap (has_internal_overlap)": ("2.13.0",),
    "torch._functorch.autograd_function.DynamoAutogradFunctionTraceHelper.fwd_trace_helper's nested ``inner`` "
    "(dynamo_traced_code.py; without it every traced forward counts as inlined)": _BOTH,
    "torch._dynamo.variables.misc.AutogradFunctionVariable.call_apply, TensorVariable, TupleVariable, "
    "UserFunctionVariable, WrapBackendDebug._torchdynamo_orig_backend (install_inlined_function_returns)": _BOTH,
    "torch._guards.CompileContext.current_compile_id().compiled_autograd_id": _BOTH,
    "InstructionTranslator.current_tx(): current_instruction, stack, kw_names (dynamo_break.py)": _BOTH,
    "current_tx().output.tracked_fakes, grapharg.source, Stateful/StatelessSymbolicContext (dynamo_inputs.py)": _BOTH,
    "torch._inductor.compile_fx.compile_fx": _BOTH,
    "torch._TorchCompileInductorWrapper.__call__": _BOTH,
    "torch._functionalize_is_multi_output_view": _BOTH,
    "torch._functorch.config: view_replay_for_aliased_outputs, enable_autograd_cache": _BOTH,
    "torch._inductor.config: fx_graph_cache; fallback_random, default_partition's refusal (random_draws.py)": _BOTH,
    "torch._functorch._aot_autograd.runtime_wrappers.gen_alias_from_base (its signature, bound by name)": _BOTH,
    "torch._C._set_grad_enabled": _BOTH,
    "torch.fx.experimental.proxy_tensor: get_proxy_mode, track_tensor_tree, disable_proxy_modes_tracing; "
    "torch._C.DisableTorchFunction (record_opaque_call, torch_function_disabled, tracing.under_a_trace)": _BOTH,
    "torch.utils._python_dispatch.TorchDispatchMode, torch.fx.node._side_effectful_functions (watching_effects)": _BOTH,
    "torch.ops.higher_order.autograd_function_apply": _BOTH,
    "torch.ops.higher_order.tag_activation_checkpoint (recorded as one node)": _BOTH,
    "node.meta['recompute'] = CheckpointPolicy.MUST_RECOMPUTE / MUST_SAVE honoured by the min-cut partitioner "
    "(mark_must_recompute)": _BOTH,
    "torch._dynamo.exc.RestartAnalysis (DYNAMO_RESTARTS)": _BOTH,
    "torch.amp.autocast_mode: _enter_autocast, _exit_autocast": _BOTH,
    "torch._dynamo.compiled_autograd._enable": _BOTH,
    "torch._dynamo.config.compiled_autograd": ("2.13.0",),
    "torch._dynamo.utils.counters (aot_autograd and inductor cache keys, cudagraph_skips)": _BOTH,
    "torch.testing._internal.two_tensor.TwoTensor": _BOTH,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv: produce_guards_expression(ignore_static=False), "
    "evaluate_guards_expression (symbolic_inputs; compile_function(dynamic=True))": _BOTH,
    "GraphModule.compile_subgraph_reason (user_stack, graph_break), gm.meta['dynamo_compile_id']": _BOTH,
    "torch._dynamo.resume_execution.TORCH_DYNAMO_RESUME_IN_PREFIX": _BOTH,
    "torch._C._autograd: _get_creation_meta, _set_creation_meta, CreationMeta": _BOTH,
    "torch._C._functionalization: unbind_int_ViewMeta, split_Tensor_ViewMeta, split_with_sizes_ViewMeta "
    "(as_tuple() layout), apply_view_meta_sequence": _BOTH,
    "torch._decomp.decompositions.dropout (eval_dropout_is_traced_as_its_input)": _BOTH,
    "torch.fx._lazy_graph_module._LazyGraphModule (lazy_graph_module)": _BOTH,
    "torch._functorch.aot_autograd.aot_function, partitioners.min_cut_rematerialization_partition, "
    "torch._dynamo.backends.debugging.boxed_nop (stock_aot_function; the fuzzer only)": _BOTH,
}


def eval_dropout_is_traced_as_its_input() -> bool:
    """Whether AOTAutograd's decomposition of ``dropout`` in eval mode or with p=0 returns its input, as eager does
    (torch 2.14), instead of ``input.clone()`` (2.13).

    Stock's behaviour depends on it: a multi-output view of such a result is, to AOTAutograd, a view of the
    dropout's input where 2.13 saw a view of an intermediate (the clone). For a graph input the unsafe fix then
    classifies the outputs ``non_alias`` and the compiled function returns real views of the input, made inside its
    autograd.Function (tests and design/02 key on this rather than on the version).
    """
    from torch._decomp import decompositions

    probe = torch.empty(0)
    return decompositions.dropout(probe, 0.5, False) is probe


def is_inplace_view_op_name(name: str) -> bool:
    """Whether ``torch.ops.aten.<name>`` is an in-place metadata change (``t_``, ``transpose_``...): its overloads
    carry torch's ``inplace_view`` tag."""
    packet = getattr(torch.ops.aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    return any(torch.Tag.inplace_view in getattr(packet, overload).tags for overload in packet.overloads())


def has_internal_overlap(t: torch.Tensor) -> bool:
    """Whether some elements of ``t`` share memory (an ``expand``): eager's in-place kernels refuse to write it."""
    return torch._debug_has_internal_overlap(t) == 1  # MemOverlap::Yes (2, TooHard, eager lets through)


def torch_function_disabled() -> contextlib.AbstractContextManager[None]:
    """No torch-function mode sees the calls made inside (as ``record_opaque_call`` runs its target)."""
    return torch._C.DisableTorchFunction()


def lazy_graph_module(root: torch.nn.Module, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """A GraphModule whose Python code is generated on its first call or ``.code``, as Dynamo makes its own: a
    slice's intermediate graphs and its epilogue (which the runtime generates its own code for) never need it."""
    return _LazyGraphModule(root, graph)


def storage_ref(t: Any) -> StorageWeakRef | None:
    """A hashable reference to the storage a tensor views (None for anything else)."""
    return StorageWeakRef(t.untyped_storage()) if isinstance(t, torch.Tensor) else None


def is_view(t: torch.Tensor) -> bool:
    return t._is_view()


def schema_of(op: OpOverload) -> torch.FunctionSchema:
    return op._schema


def overload_packet(op: OpOverload) -> Any:
    """The ``torch.ops.aten.x`` callable of ``torch.ops.aten.x.overload``: it dispatches as the user's call did."""
    return op._op


def storage_id(t: torch.Tensor) -> int:
    """An id of the storage ``t`` views, equal for every alias of it (fake tensors included)."""
    return t.untyped_storage()._cdata


def fakify_like_dynamo(t: torch.Tensor, fake_mode: FakeTensorMode) -> torch.Tensor:
    """A real input of a Dynamo graph as a fake of the backend's mode, keeping Dynamo's symbols.

    Mirrors ``process_inputs`` in torch/_functorch/_aot_autograd/frontend_utils.py.
    """
    if isinstance(t, FakeTensor) and t.fake_mode is fake_mode:
        return t
    symbolic_context = source = None
    tracing_context = torch._guards.TracingContext.try_get()
    if tracing_context is not None and t in tracing_context.tensor_to_context:
        symbolic_context = tracing_context.tensor_to_context[t]
        source = symbolic_context.tensor_source
    return fake_mode.from_tensor(t, symbolic_context=symbolic_context, source=source, trace=False)


def is_restricted_view(t: torch.Tensor) -> bool:
    """A view autograd forbids rebasing (multi-output, no_grad, custom Function, inference mode views): after an
    alias of it is written, reading its ``grad_fn`` raises."""
    meta = torch._C._autograd
    return t._is_view() and meta._get_creation_meta(t) != meta.CreationMeta.DEFAULT


def register_backend_once(fn: Callable[..., Any], name: str) -> None:
    """Register ``fn`` as ``name`` unless Dynamo already has it or will load it from an entry point.

    Note [Registering with and without the entry point]
    An installed package declares the name in the ``torch_dynamo_backends`` entry-point group. Dynamo's
    ``lookup_backend`` then loads the entry point, which imports this package, and registers what it loaded;
    had the import registered the name too, that second registration fails with "duplicate name". So the
    import registers only when no entry point declares the name (the package used from a source tree), and
    otherwise leaves the registration to Dynamo, whichever of the import or the lookup comes first.
    """
    from torch._dynamo.backends import registry

    registry._discover_entrypoint_backends()
    if name in registry._COMPILER_FNS or registry._BACKENDS.get(name) is not None:
        return
    registry.register_backend(fn, name=name)


def dynamo_graph_origin(gm: Any) -> tuple[str, str, int, str] | None:
    """(function name, file, line where the graph ends, compile id) of a graph Dynamo captured, else None."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    stack = getattr(reason, "user_stack", None)
    if not stack:
        return None
    frame = stack[0]  # the frame Dynamo compiled (later entries: calls inlined into it)
    meta = getattr(gm, "meta", None)
    compile_id = meta.get("dynamo_compile_id") if isinstance(meta, dict) else None
    return frame.name, frame.filename, int(frame.lineno or 0), "" if compile_id is None else str(compile_id)


def compiled_autograd_configured() -> bool:
    """Whether compiled autograd is on in Dynamo's config (PyTorch's dynamo-wrapped test suites turn it on)."""
    return bool(torch._dynamo.config.compiled_autograd)


def compiling_a_compiled_autograd_graph() -> bool:
    """Whether Dynamo is compiling the backward graph compiled autograd built (its compile id is ``!N/...``)."""
    from torch._guards import CompileContext

    compile_id = CompileContext.current_compile_id()
    return compile_id is not None and compile_id.compiled_autograd_id is not None


def ends_at_graph_break(gm: Any) -> bool:
    """Whether Dynamo compiled ``gm`` at a graph break, so a resume function gets its outputs."""
    return bool(getattr(getattr(gm, "compile_subgraph_reason", None), "graph_break", False))


def starts_after_graph_break(gm: Any) -> bool:
    """Whether Dynamo compiled ``gm`` from a resume function: its inputs may be an earlier graph's outputs."""
    from torch._dynamo.resume_execution import TORCH_DYNAMO_RESUME_IN_PREFIX

    name = compiled_code_name(gm) or (dynamo_graph_origin(gm) or ("",))[0]
    return name.startswith(TORCH_DYNAMO_RESUME_IN_PREFIX)


def lookup_backend(name: str) -> Callable[..., Any]:
    from torch._dynamo.backends.registry import lookup_backend as _lookup

    return _lookup(name)


def stock_aot_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Stock AOTAutograd on the whole function, no Dynamo (functorch's ``aot_function``), compiled as the
    ``aot_eager`` backend compiles a graph: the stock counterpart of ``compile_function(fn, "aot_eager")``."""
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._functorch.aot_autograd import aot_function
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    partition = min_cut_rematerialization_partition
    return aot_function(fn, boxed_nop, boxed_nop, partition_fn=partition, keep_inference_input_mutations=True)


def inductor_compile_fx() -> Callable[..., Any]:
    from torch._inductor.compile_fx import compile_fx

    return compile_fx


def inductor_wrapper_class() -> type:
    return torch._TorchCompileInductorWrapper


@contextlib.contextmanager
def multi_output_view_optimization_disabled() -> Iterator[None]:
    """Switch off the unsafe fix of pytorch PR #111411.

    collect_metadata_analysis asks ``torch._functionalize_is_multi_output_view`` whether an aliased output came
    from a multi-output view; answering False makes AOTAutograd regenerate every such output on its own.
    """
    original = torch._functionalize_is_multi_output_view
    torch._functionalize_is_multi_output_view = lambda t: False
    try:
        yield
    finally:
        torch._functionalize_is_multi_output_view = original


@contextlib.contextmanager
def compile_caches_disabled() -> Iterator[None]:
    """No AOTAutograd or FX graph cache: their keys do not see the patches above."""
    import torch._inductor.config as inductor_config

    with functorch_config.patch(enable_autograd_cache=False), inductor_config.patch(fx_graph_cache=False):
        yield


@contextlib.contextmanager
def compile_caches_enabled() -> Iterator[None]:
    """The AOTAutograd cache and the FX graph cache on (TORCHINDUCTOR_CACHE_DIR says where they live)."""
    import torch._inductor.config as inductor_config

    with functorch_config.patch(enable_autograd_cache=True), inductor_config.patch(fx_graph_cache=True):
        yield


def compile_counters() -> dict[str, int]:
    """Counted in this process so far: AOTAutograd and FX graph cache hits and misses, CUDA graphs skipped."""
    from torch._dynamo.utils import counters

    return {
        "autograd_cache_hit": counters["aot_autograd"]["autograd_cache_hit"],
        "autograd_cache_miss": counters["aot_autograd"]["autograd_cache_miss"],
        "autograd_cache_bypass": counters["aot_autograd"]["autograd_cache_bypass"],
        "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
        "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
    }


def compiled_autograd(compiler_fn: Callable[[torch.fx.GraphModule], Any]) -> contextlib.AbstractContextManager[None]:
    """Backward passes in the block run through compiled autograd; ``compiler_fn`` gets each autograd graph."""
    from torch._dynamo import compiled_autograd as ca

    return ca._enable(compiler_fn)


def autocast_region_markers() -> tuple[Any, Any]:
    """The callables an autocast region's entry and exit are recorded as in a pre-dispatch graph."""
    from torch.amp import autocast_mode

    return autocast_mode._enter_autocast, autocast_mode._exit_autocast


def two_tensor_class() -> type:
    from torch.testing._internal.two_tensor import TwoTensor

    return TwoTensor


# Dynamo's record; random draws kept; what backward reads; the stock variants compare/strategies.py emulates.
from .dynamo_break import compiled_code_name, graph_break_writes  # noqa: E402, F401
from .dynamo_inputs import fakified_with_static_sizes, restore_input_contexts  # noqa: E402, F401
from .dynamo_traced_code import dropout_drops, inlined_autograd_functions, install_inlined_function_returns  # noqa: E402, F401
from .opaque_calls import function_backward_reads, record_opaque_call, watching_effects  # noqa: E402, F401
from .pre_dispatch_trace import trace_pre_dispatch  # noqa: E402
from .random_draws import keeping_random_draws, refused_a_kept_draw  # noqa: E402, F401
from .saved_for_backward import backward_reads, eager_node_name, eager_saved_inputs, mark_must_recompute  # noqa: E402, F401
from .stock_regeneration import as_strided_output_regeneration, slice_output_regeneration  # noqa: E402
from .symbolic_inputs import shape_guard, symbolic_fake_mode  # noqa: E402, F401


def is_marked_must_recompute(node: torch.fx.Node) -> bool:
    """Whether ``mark_must_recompute`` tagged ``node`` (the tag travels with the node's meta through our stages)."""
    return node.meta.get("recompute") is torch.utils.checkpoint.CheckpointPolicy.MUST_RECOMPUTE
