"""Dynamo's record of a graph's inputs (private Dynamo APIs, behind _torch_internals like every other)."""

from __future__ import annotations

from typing import Any

import torch


def restore_input_contexts(gm: torch.fx.GraphModule, example_inputs: Any) -> None:
    """Each tensor input's symbolic context back to the one Dynamo tracked under the input's own source, knowing
    the symbols of Dynamo's fake for it.

    ``tensor_to_context`` keeps one context per tensor, the last Dynamo made, and a context makes a symbol per
    source unless it cached one. A tensor Dynamo reached under two sources (an input, and another input's
    ``x._base``) got its symbols under the first; the other context caches none. Fakified with it, here or in
    AOTAutograd's ``process_inputs``, the input gets new symbols that no guard can name ("sources must not be empty
    for symbol", fuzzer s1803_67 and s1701_1741, one order each; which order depends on the hash seed; stock
    meets it on its own views of inputs).
    """
    tracing_context = torch._guards.TracingContext.try_get()
    fake_mode = tracing_context.fake_mode if tracing_context is not None else None
    if fake_mode is None or fake_mode.shape_env is None:
        return
    tracked = _tracked_contexts()
    for p, t in zip(gm.graph.find_nodes(op="placeholder"), example_inputs):
        if not isinstance(t, torch.Tensor) or t not in tracing_context.tensor_to_context:
            continue
        own = tracked.get(getattr(getattr(p.meta.get("grapharg"), "source", None), "name", None))
        source = getattr(tracing_context.tensor_to_context[t], "tensor_source", None)
        if own is not None and source is not None and own.tensor_source.name != source.name:
            tracing_context.tensor_to_context[t] = own
        _cache_dynamo_symbols(tracing_context.tensor_to_context[t], p.meta.get("example_value"), fake_mode.shape_env)


def _cache_dynamo_symbols(context: Any, fake: Any, shape_env: Any) -> None:
    """Cache in ``context`` the symbol of each size of Dynamo's fake that is one, under the context's source."""
    source, cache = (
        getattr(context, "tensor_source", None),
        getattr(context, "shape_env_to_source_to_symbol_cache", None),
    )
    if source is None or cache is None or not isinstance(fake, torch.Tensor):
        return
    known = cache.setdefault(id(shape_env), {})
    for i, size in enumerate(fake.shape):
        if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
            known.setdefault(f"{source.name}.size()[{i}]", size.node.expr)


def _tracked_contexts() -> dict[str, Any]:
    """Source name -> the symbolic context Dynamo's translator tracked for it (the first, where several)."""
    from torch._dynamo.symbolic_convert import InstructionTranslator

    tx = InstructionTranslator.current_tx()
    found: dict[str, Any] = {}
    for tracked in tx.output.tracked_fakes if tx is not None else ():
        if getattr(tracked.symbolic_context, "tensor_source", None) is not None:
            found.setdefault(tracked.source.name, tracked.symbolic_context)
    return found


def fakified_with_static_sizes(t: torch.Tensor) -> torch.Tensor:
    """``t`` (a real tensor Dynamo never saw: an input's example viewed with a Function's traced geometry) registered
    in Dynamo's tracing context with static sizes, so that AOTAutograd fakifies it, and the base it views, without
    fresh symbols: a symbol without a source makes Dynamo's guard building raise IndexError once the compiled code
    guards on it (``chunk``'s split sizes; fuzzer s1817_358). The fake still shares its storage with the input's."""
    tracing_context = torch._guards.TracingContext.try_get()
    fake_mode = tracing_context.fake_mode if tracing_context is not None else None
    if fake_mode is None or fake_mode.shape_env is None:
        return t
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatefulSymbolicContext, StatelessSymbolicContext

    def static(x: torch.Tensor) -> dict[str, Any]:
        return {"dynamic_sizes": [DimDynamic.STATIC] * x.dim()}

    base = t._base
    tracing_context.tensor_to_context[t] = StatefulSymbolicContext(
        **static(t),
        view_base_context=StatelessSymbolicContext(**static(base)) if base is not None else None,
        tensor_source=ConstantSource(f"__predispatch_views_static_alias_{id(t)}"),
        shape_env_to_source_to_symbol_cache={},
    )
    return t
