"""What Dynamo's record of the code it traced says about custom autograd.Functions (private Dynamo and functorch
APIs, behind _torch_internals like every other)."""

from __future__ import annotations

import types

import torch


def _forward_tracer_code() -> types.CodeType | None:
    """The code of the function inside which Dynamo traces the forward of a Function it records as one
    ``autograd_function_apply`` node (None where this torch has no such helper: every forward counts as inlined,
    the conservative answer)."""
    try:
        from torch._functorch.autograd_function import DynamoAutogradFunctionTraceHelper
    except ImportError:
        return None
    helper = getattr(DynamoAutogradFunctionTraceHelper, "fwd_trace_helper", None)
    consts = getattr(getattr(helper, "__code__", None), "co_consts", ())
    return next((c for c in consts if isinstance(c, types.CodeType) and c.co_name == "inner"), None)


def inlined_autograd_functions() -> list[type]:
    """Custom autograd.Functions whose forward Dynamo inlined into the graph being compiled (it does so when no
    input requires grad, instead of recording ``autograd_function_apply``).

    Dynamo traces the forward of a Function it records as ``autograd_function_apply`` too, inside the ``inner`` of
    ``DynamoAutogradFunctionTraceHelper.fwd_trace_helper``. ``get_traced_code`` lists each code object Dynamo
    finished inlining, in the order it finished: a forward that the next ``inner`` in the list follows was traced
    for such a node; any other occurrence was inlined as plain code."""
    from torch._guards import TracingContext

    inner = _forward_tracer_code()
    forwards: dict[types.CodeType, type] = {}
    stack = list(torch.autograd.Function.__subclasses__())
    while stack:
        cls = stack.pop()
        stack += cls.__subclasses__()
        forward = getattr(cls.forward, "__code__", None) if "forward" in cls.__dict__ else None  # a staticmethod
        if forward is not None:
            forwards[forward] = cls
    traced = list(TracingContext.get_traced_code() or ())
    found: set[type] = set()
    for k, code in enumerate(traced):
        if code not in forwards:
            continue
        following = next((c for c in traced[k + 1 :] if c in forwards or c is inner), None)
        if following is not inner:  # not the forward of a recorded autograd_function_apply
            found.add(forwards[code])
    return sorted(found, key=lambda c: c.__qualname__)
