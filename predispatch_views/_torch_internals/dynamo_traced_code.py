"""What Dynamo's record of the code it traced says about custom autograd.Functions (private Dynamo and functorch
APIs, behind _torch_internals like every other)."""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable
from typing import Any

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
    context = TracingContext.try_get()
    # Note [An inlined Function returns its input as eager does]: every call of these was rewritten.
    rewritten = _REWRITTEN.get(context, set()) - _NOT_REWRITTEN.get(context, set()) if context is not None else set()
    found: set[type] = set()
    for k, code in enumerate(traced):
        if code not in forwards:
            continue
        following = next((c for c in traced[k + 1 :] if c in forwards or c is inner), None)
        if following is not inner and forwards[code] not in rewritten:  # not recorded as autograd_function_apply
            found.add(forwards[code])
    return sorted(found, key=lambda c: c.__qualname__)


# Note [An inlined Function returns its input as eager does]
# Without grad (no input requires it, or grad mode off) Dynamo inlines a Function's forward as plain code, so an
# input the forward returns as it is comes out of the graph as that input, the same tensor. Eager's apply
# (custom_function.cpp, ``_process_backward_mode_ad``, the non-differentiable branch) returns such an input as
# ``x.view_as(x)`` taken under no_grad where it does not require grad, and as ``x.detach()`` where it does (grad
# mode off); a forward cannot mark it dirty there (Dynamo breaks the graph on ``mark_dirty`` when inlining). For
# graphs compiled by this backend the inlined call's result is rewritten so, in Dynamo's own graph: the view is an
# op the epilogue replays, and the views and identities the caller sees are eager's. Other backends trace as before.
# A result the rewrite does not cover (another container, an output requiring grad that is no input) leaves the Function
# in ``inlined_autograd_functions``, whose rule falls back as before. Whether the returned input requires grad is read
# off Dynamo's fake value, except through a dropout that returns its input (eval or p=0): its fake kernel allocates a
# tensor that never requires grad under no_grad, while eager's result is the input itself, which may (fuzzer s1821_612);
# there the dropout's own input decides. Decided so, a rewritten view may cross a graph break even where its base is
# written before the next graph: Dynamo reads its ``grad_fn`` while wrapping it, which raises only for a view whose base
# requires grad (``VariableHooks::grad_fn``), and eager's apply returns such an input detached, no view at all. (Fuzzer
# s1602_1270 crashed there, under inference_mode, when the dropout's fake chose ``view_as`` for an input requiring grad;
# the fallback it added kept 11 of seed 1830's programs from replaying.) Eager also marks the view IN_CUSTOM_FUNCTION
# where the replay's is NO_GRAD_MODE: an in-place write to it with grad raises in both, with another message (Dynamo's
# trace cannot call ``_set_creation_meta``). A graph that falls back goes to stock as Dynamo traced it for stock
# (``without_inlined_function_views``): stock never saw these views, and AOTAutograd returned a wrong value on one such
# graph under dynamic shapes (fuzzer s1601_1125).
# Per TracingContext (one compile): the Functions whose inlined calls were rewritten, and those with a call that
# was not.
_REWRITTEN: weakref.WeakKeyDictionary[Any, set[type]] = weakref.WeakKeyDictionary()
_NOT_REWRITTEN: weakref.WeakKeyDictionary[Any, set[type]] = weakref.WeakKeyDictionary()


def _view_as_under_no_grad(x: torch.Tensor) -> torch.Tensor:  # traced by Dynamo in place of the returned input
    with torch.no_grad():
        return x.view_as(x)


def _detached(x: torch.Tensor) -> torch.Tensor:
    return x.detach()


_FOR_BACKENDS: list[Callable[[Any], bool]] = []  # which compiler_fn (unwrapped) the rewrite is for


def install_inlined_function_returns(is_this_backend: Callable[[Any], bool]) -> bool:
    """Install the rewrite of Note [An inlined Function returns its input as eager does] for the graphs whose
    compiler ``is_this_backend`` accepts too (Dynamo's compiler_fn, unwrapped). False where this torch lacks the
    hook."""
    if is_this_backend not in _FOR_BACKENDS:
        _FOR_BACKENDS.append(is_this_backend)
    try:
        from torch._dynamo.variables import (
            NNModuleVariable,
            TensorVariable,
            TupleVariable,
            UserFunctionVariable,
            VariableTracker,
        )
        from torch._dynamo.variables.misc import AutogradFunctionVariable
        from torch._guards import TracingContext
    except ImportError:
        return False
    original = AutogradFunctionVariable.call_apply
    if getattr(original, "_predispatch_views", False):
        return True

    def needs_grad(tx: Any, args: Any, kwargs: Any) -> bool:  # Dynamo's own test for recording, not inlining
        found = False

        def visit(vt: Any) -> None:
            nonlocal found
            found = found or (vt.is_tensor() and vt.requires_grad is not False)
            found = found or (isinstance(vt, NNModuleVariable) and vt.is_training(tx))

        VariableTracker.visit(visit, (args, kwargs))
        return found and torch.is_grad_enabled()

    def call_apply(self: Any, tx: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        compiler_fn = _unwrapped(tx.output.compiler_fn)
        if not any(p(compiler_fn) for p in _FOR_BACKENDS) or needs_grad(tx, args, kwargs):
            return original(self, tx, args, kwargs)
        result = original(self, tx, args, kwargs)
        inputs = {a.as_proxy().node for a in args if isinstance(a, TensorVariable)}
        items = result.items if isinstance(result, TupleVariable) else [result]
        rewritten, covered = [], isinstance(result, (TupleVariable, TensorVariable))
        for item in items:
            if isinstance(item, TensorVariable) and item.as_proxy().node in inputs:
                node = item.as_proxy().node
                requires_grad = _runtime_requires_grad(node) if is_dropout_call(node) else item.requires_grad
                if requires_grad is None:
                    covered = False  # left to the rule
                    break
                helper = _detached if requires_grad else _view_as_under_no_grad
                item = UserFunctionVariable(helper).call_function(tx, [item], {})
            elif isinstance(item, TensorVariable) and item.requires_grad:
                covered = False  # eager detaches it in place (not an input): left to the rule
            rewritten.append(item)
        if (context := TracingContext.try_get()) is not None:
            (_REWRITTEN if covered else _NOT_REWRITTEN).setdefault(context, set()).add(self.fn_cls)
        if not covered:
            return result
        return TupleVariable(rewritten) if isinstance(result, TupleVariable) else rewritten[0]

    call_apply._predispatch_views = True  # type: ignore[attr-defined]
    AutogradFunctionVariable.call_apply = call_apply
    return True


def dropout_drops(n: torch.fx.Node) -> bool | None:
    """For a torch-level dropout call of Dynamo's graph: True where it draws a fresh tensor (training, p > 0),
    False where at::dropout returns its input itself (``p == 0`` or not training), None where its arguments do
    not say (Note [Ops that return their input] in graph_ops.py)."""
    try:
        bound = inspect.signature(n.target).bind(*n.args, **n.kwargs)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    p, training = bound.arguments.get("p"), bound.arguments.get("training", bound.arguments.get("train"))
    if p == 0 or training is False:
        return False
    return True if isinstance(p, (int, float)) and p > 0 and training is True else None


def is_dropout_call(n: torch.fx.Node) -> bool:
    name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
    return n.op in ("call_function", "call_method") and "dropout" in name


def _runtime_requires_grad(n: torch.fx.Node) -> bool | None:
    """Whether the tensor ``n`` stands for requires grad when the graph runs, read through the dropouts that
    return their input (Note [An inlined Function returns its input as eager does]); None where unknown."""
    while is_dropout_call(n) and n.args and isinstance(n.args[0], torch.fx.Node):
        drops = dropout_drops(n)
        if drops is None:
            return None
        if drops:
            break
        n = n.args[0]
    value = n.meta.get("example_value")
    return value.requires_grad if isinstance(value, torch.Tensor) else None


def _unwrapped(compiler_fn: Any) -> Any:
    """The backend callable under Dynamo's wrappers (WrapBackendDebug, _TorchCompileWrapper)."""
    for _ in range(8):
        inner = getattr(compiler_fn, "_torchdynamo_orig_backend", None) or getattr(compiler_fn, "compiler_fn", None)
        if inner is None:
            return compiler_fn
        compiler_fn = inner
    return compiler_fn


def _added_by_rewrite(n: torch.fx.Node) -> bool:
    """A node the rewrite traced: the innermost frame of its stack is one of the helpers."""
    helpers = {(f.__code__.co_filename, f.__name__) for f in (_view_as_under_no_grad, _detached)}
    frames = str(n.meta.get("stack_trace") or "").strip().splitlines()
    last = next((line.strip() for line in reversed(frames) if line.strip().startswith("File ")), "")
    return any(f'File "{file}"' in last and last.endswith(f"in {name}") for file, name in helpers)


def without_inlined_function_views(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` as Dynamo traces it for another backend: the nodes the rewrite of Note [An inlined Function returns
    its input as eager does] traced (their stack's innermost frame is one of its helpers) removed, each view's uses
    given its input. ``gm`` itself where there are none."""
    added = _added_by_rewrite
    if not any(added(n) for n in gm.graph.nodes):
        return gm
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, env))
    for old in reversed(list(gm.graph.nodes)):
        if old.op in ("call_function", "call_method") and added(old):
            new = env[old]
            if new.users and isinstance(old.args[0], torch.fx.Node):
                new.replace_all_uses_with(env[old.args[0]])
            if not new.users:
                graph.erase_node(new)
    for n in list(graph.nodes):  # the helper's no_grad block, empty now: a grad-mode switch another one follows
        if n.target is torch._C._set_grad_enabled and n.next.target is torch._C._set_grad_enabled and not n.users:
            graph.erase_node(n)
    copy = torch.fx.GraphModule(gm, graph)
    copy.meta.update(gm.meta)
    for name in ("compile_subgraph_reason",):
        if hasattr(gm, name):
            setattr(copy, name, getattr(gm, name))
    return copy
