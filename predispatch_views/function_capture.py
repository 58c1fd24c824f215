"""Stage 1, the no-Dynamo path of compile_function: a function's pre-dispatch graph, its closed-over tensors lifted
into inputs, and what such a trace cannot record (it raises UnsupportedCapture, and the function runs eagerly)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.overrides import TorchFunctionMode

from . import _torch_internals as ti
from . import graph_ops
from .capture import UnsupportedCapture, record_custom_function
from .fallbacks import Fallback, FallbackKind
from .graph_ops import requires_grad_set


@dataclass
class FunctionCapture:
    """A pre-dispatch graph of a function of tensors whose closed-over tensors are lifted into inputs.

    The placeholders are the function's tensor inputs, then one per entry of ``lifted``: the real tensors the
    function read without receiving them (module parameters and buffers, closed-over or global tensors), in
    the order the trace met them. ``inputs`` are the fakes of the function's tensor inputs.
    """

    graph: fx.GraphModule
    fake_mode: ti.FakeTensorMode
    inputs: list[torch.Tensor]
    lifted: list[torch.Tensor]


def capture_closure(
    flat_fn: Callable[..., list[Any]], flat_tensors: Sequence[torch.Tensor], *, dynamic: bool = False
) -> FunctionCapture:
    """Trace ``flat_fn`` (returning a flat list of tensors, and of symbolic sizes with ``dynamic``) with static
    shapes, or with symbolic sizes for the inputs (``dynamic``: lifted tensors keep static ones, as aot_function
    keeps a module's), lifting closed-over tensors.

    Note [Lifting closed-over tensors]
    A function may read tensors it does not receive: ``lin(x)`` reads ``lin.weight``. With a fake mode that
    allows real tensors, make_fx records each such tensor as a ``get_attr`` constant holding the real tensor
    itself (by identity); turning those nodes into trailing placeholders and passing the same real tensors on
    every call is what aot_module / functional_call do with a module's state: autograd of the compiled program
    reaches the real parameters (``.grad`` lands on them) and in-place updates (an optimizer step, a running
    stat) are seen by the next call. A constant the function creates itself (``torch.tensor([1., 2.])``) is
    read through ``lift_fresh_copy`` and stays a constant: eager makes a fresh one on every call.

    Raises UnsupportedCapture for calls the trace would silently drop (Note [What the trace cannot record]).
    """
    fake_mode = ti.symbolic_fake_mode() if dynamic else ti.FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [fake_mode.from_tensor(t) for t in flat_tensors]
    watch = _CaptureWatch(fake_mode)

    def watched(*args: Any) -> list[Any]:
        with watch, _autograd_functions_refused():
            return flat_fn(*args)

    rng_state = torch.get_rng_state()
    with fake_mode:
        gm = ti.trace_pre_dispatch(watched, fakes)
    if not torch.equal(torch.get_rng_state(), rng_state):
        # Fake random ops draw nothing, so the real generator moved only because the function set it
        # (``torch.manual_seed``, ``set_rng_state``): the trace records no such call (OpInfo's wrapper_set_seed).
        torch.set_rng_state(rng_state)
        raise UnsupportedCapture(_SETS_RNG)
    _refuse_writes_to_overlapping_memory(gm)
    lifted = _lift_constants(gm, watch.real_of)
    return FunctionCapture(gm, fake_mode, fakes, lifted)


def _refuse_writes_to_overlapping_memory(gm: fx.GraphModule) -> None:
    """Eager's in-place kernels refuse a target whose elements share memory (``a.expand(3, 1).mul_(-1)``); fake
    tensors do not check, and functionalization turns the write into an op and a copy that never meet the check,
    so the compiled function would run where eager raises (fuzzer s1203_4). Raised here, the function runs
    eagerly, and eager raises its own error."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and graph_ops.is_data_mutation(n):
            for w in graph_ops.written_args(n):
                if isinstance(v := w.meta.get("val"), torch.Tensor) and ti.has_internal_overlap(v):
                    raise RuntimeError(f"{graph_ops.op_name(n)} writes {w.name}, whose elements share memory")


def _lift_constants(gm: fx.GraphModule, real_of: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    """Turn every get_attr of a tensor from outside the function into a trailing placeholder."""
    graph = gm.graph
    placeholders = list(graph.find_nodes(op="placeholder"))
    by_tensor: dict[int, fx.Node] = {}
    lifted: list[torch.Tensor] = []
    for n in list(graph.find_nodes(op="get_attr")):
        value = getattr(gm, n.target)  # type: ignore[arg-type]
        if not isinstance(value, torch.Tensor) or _created_inside(n):
            continue
        if id(value) in real_of:
            value = real_of[id(value)][1]
        elif isinstance(value, ti.FakeTensor):
            raise AssertionError(f"a fake constant {n.target} the capture did not make")
        placeholder = by_tensor.get(id(value))
        if placeholder is None:
            anchor = placeholders[-1] if placeholders else None
            ctx = graph.inserting_after(anchor) if anchor is not None else graph.inserting_before(None)
            with ctx:
                placeholder = graph.placeholder(f"lifted_{len(lifted)}")
            placeholder.meta = dict(n.meta)
            placeholders.append(placeholder)
            by_tensor[id(value)] = placeholder
            lifted.append(value)
        n.replace_all_uses_with(placeholder)
        graph.erase_node(n)
        delattr(gm, n.target)  # type: ignore[arg-type]
    gm.recompile()
    return lifted


def _created_inside(get_attr: fx.Node) -> bool:
    # torch.tensor(...) inside the function: make_fx stores the value and copies it with lift_fresh_copy.
    fresh = (torch.ops.aten.lift_fresh_copy.default, torch.ops.aten.lift_fresh.default)
    return bool(get_attr.users) and all(u.target in fresh for u in get_attr.users)


class _CaptureWatch(TorchFunctionMode):
    """Fakify the real tensors a traced function reads, and refuse what the trace cannot record.

    A real tensor (a parameter, a closed-over tensor) reaching a torch call is replaced by its fake, memoized,
    and remembered in ``real_of`` (id of the fake -> (fake, real)): make_fx then records it as a ``get_attr``
    constant that _lift_constants maps back to the real tensor. Letting the fake mode convert real tensors
    itself is not enough: an in-place call whose only tensor is real (``num_batches_tracked.add_(1)``) is
    constant-folded by FakeTensorMode, on the real tensor, during the trace.

    Note [What the trace cannot record]
    A pre-dispatch trace records ATen calls; it runs, but does not record, calls that only change autograd
    state on the fake tensors: ``requires_grad_(False)`` (``requires_grad_(True)`` is recorded: Note
    [requires_grad_ inside a function]),
    hooks (``register_hook``, ``retain_grad``), a backward pass inside the function (``torch.autograd.grad``:
    its ops would be recorded as forward ops, with ``create_graph`` semantics whatever the call said), and an
    ``inference_mode`` region (compiled with autograd on: its results would not be inference tensors). Each raises
    UnsupportedCapture with what it saw. A custom ``autograd.Function`` is recorded as one call where its ``apply``
    is looked up during the call (``F.apply(x)``); one bound before the capture (``op = F.apply``) would be inlined,
    its forward traced and its backward lost, and raises too.
    """

    def __init__(self, fake_mode: ti.FakeTensorMode) -> None:
        super().__init__()
        self.fake_mode = fake_mode
        self.real_of: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.inference_mode = torch.is_inference_mode_enabled()

    def _fake(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, ti.FakeTensor):
            return t
        # Unseen by the trace's torch-function modes: the fake mode's converter toggles grad mode (``no_grad``
        # around building the meta tensor), which the pre-dispatch trace would record into the program (a restore
        # to grad mode on inside a function called under no_grad; fuzzer s902_72).
        with ti.torch_function_disabled():
            fake = self.fake_mode.from_tensor(t, static_shapes=True)
        self.real_of[id(fake)] = (fake, t)
        return fake

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if _requires_grad_wanted(func, args, kwargs) is True:  # Note [requires_grad_ inside a function]
            result = record_custom_function(
                requires_grad_set, (self._fake(args[0]),), {}, "requires_grad_(True)", may_run_eagerly=True
            )
            return None if func == _REQUIRES_GRAD_SETTER else result
        unrecordable = _unrecordable(func, args, kwargs)
        if unrecordable is None and torch.is_inference_mode_enabled() != self.inference_mode:
            unrecordable = Fallback(
                FallbackKind.INFERENCE_MODE_IN_FUNCTION,
                "an inference_mode region inside the function is not recorded by the trace",
            )
        if unrecordable is not None:
            raise UnsupportedCapture(unrecordable)
        args, kwargs = ti.tree_map_only(torch.Tensor, self._fake, (args, kwargs))
        return func(*args, **kwargs)


_BACKWARD_CALLS = {torch.autograd.grad, torch.autograd.backward, torch.Tensor.backward}
_HOOK_CALLS = {torch.Tensor.register_hook, torch.Tensor.retain_grad, torch.Tensor.register_post_accumulate_grad_hook}


def _requires_grad_wanted(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> bool | None:
    """The flag a ``requires_grad_`` call or ``requires_grad =`` assignment changes a tensor's to; None otherwise."""
    if func is torch.Tensor.requires_grad_:
        wanted = kwargs.get("requires_grad", args[1] if len(args) > 1 else True)
    elif func == _REQUIRES_GRAD_SETTER:  # a new method-wrapper object on every access: compare by ==
        wanted = args[1]
    else:
        return None
    changes = isinstance(args[0], torch.Tensor) and bool(wanted) != args[0].requires_grad
    return bool(wanted) if changes else None


def _unrecordable(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Fallback | None:
    name = getattr(func, "__qualname__", getattr(func, "__name__", repr(func)))
    if func in _BACKWARD_CALLS:
        message = f"a backward pass inside the function ({name}) is not recorded by the trace"
        return Fallback(FallbackKind.BACKWARD_IN_FUNCTION, message)
    if func in _HOOK_CALLS:
        return Fallback(FallbackKind.HOOKS_IN_FUNCTION, f"{name} inside the function: hooks on traced tensors are lost")
    if (wanted := _requires_grad_wanted(func, args, kwargs)) is not None:
        message = f"requires_grad_({wanted}) inside the function is not recorded by the trace"
        return Fallback(FallbackKind.REQUIRES_GRAD_IN_FUNCTION, message)
    return None


_REQUIRES_GRAD_SETTER = torch.Tensor.requires_grad.__set__  # type: ignore[attr-defined]


_refusing = threading.local()
_guard_lock = threading.Lock()
_guard_users = [0]  # captures in flight, all threads: Function.apply stays wrapped until the last one ends


@contextlib.contextmanager
def _autograd_functions_refused() -> Iterator[None]:
    """Custom autograd.Function calls in this thread raise UnsupportedCapture (Note [What the trace cannot
    record]). ``Function.apply`` is wrapped only while captures run; other threads call through unchanged."""
    function_class = torch.autograd.Function
    with _guard_lock:
        if _guard_users[0] == 0:
            function_class.apply = classmethod(_refusing_apply(function_class.__dict__["apply"]))  # type: ignore[method-assign]
            _BACKWARD_NODE.__init__ = _refusing_bound_apply  # type: ignore[method-assign]
            for module, name in _RNG_SETTERS:
                setattr(module, name, _refusing_rng_setter(getattr(module, name)))
        _guard_users[0] += 1
    previous = getattr(_refusing, "active", False)
    _refusing.active = True
    try:
        yield
    finally:
        _refusing.active = previous
        with _guard_lock:
            _guard_users[0] -= 1
            if _guard_users[0] == 0:
                function_class.apply = function_class.__dict__["apply"].__func__.original  # type: ignore[method-assign]
                del _BACKWARD_NODE.__init__
                for module, name in _RNG_SETTERS:
                    setattr(module, name, getattr(module, name).original)


# Every Function's apply makes its backward node, an instance of a subclass of this class (none defines __init__).
_BACKWARD_NODE = torch.autograd.function.BackwardCFunction


def _refusing_bound_apply(node: Any, *args: Any, **kwargs: Any) -> None:
    """A Function applied during a capture without passing the wrapped ``apply``: one bound before it (``op =
    F.apply`` at import) calls the original, which would inline the forward and lose the backward."""
    if getattr(_refusing, "active", False):
        name = node._forward_cls.__name__
        message = f"autograd.Function {name} was applied through an apply bound before the capture: "
        message += "its backward would be lost"
        raise UnsupportedCapture(Fallback(FallbackKind.BOUND_APPLY_IN_FUNCTION, message))


# Calls that set the random number generator: the trace records none of them (OpInfo's wrapper_set_seed seeds
# inside freeze_rng_state, which restores the state, so the generator looks unmoved after the trace).
_RNG_SETTERS = [
    (torch, "manual_seed"),
    (torch.random, "manual_seed"),
    (torch, "set_rng_state"),
    (torch.random, "set_rng_state"),
]


_SETS_RNG = Fallback(
    FallbackKind.SETS_RNG,
    "the function sets the random number generator (torch.manual_seed, set_rng_state...): the trace does not record it",
)


def _refusing_rng_setter(original: Callable[..., Any]) -> Callable[..., Any]:
    def setter(*args: Any, **kwargs: Any) -> Any:
        if getattr(_refusing, "active", False) and not _restores_the_current_state(original, args, kwargs):
            raise UnsupportedCapture(_SETS_RNG)
        return original(*args, **kwargs)

    setter.original = original  # type: ignore[attr-defined]
    return setter


def _restores_the_current_state(setter: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``set_rng_state`` to the state the generator has: a no-op, which the trace may leave out. Dynamo's own frame
    compile ends with one (``preserve_rng_state``, in a ``finally``), so ``torch.cond``, ``map`` and
    ``while_loop``, which compile their branches with Dynamo when called outside a trace, make it here (a fake
    trace draws no number); refused there, it broke off Dynamo's cleanup and left compiled autograd unusable in
    the process."""
    if setter.__name__ != "set_rng_state":
        return False
    state = args[0] if args else kwargs.get("new_state")
    try:  # numpy(): no dispatch, so the trace's modes see no call
        return bytes(state.numpy()) == bytes(torch.get_rng_state().numpy())
    except (AttributeError, RuntimeError, TypeError):  # a fake or traced state
        return False


def _refusing_apply(original: classmethod) -> Callable[..., Any]:  # type: ignore[type-arg]
    def apply(cls: type, *args: Any, **kwargs: Any) -> Any:
        if getattr(_refusing, "active", False):
            return _recorded_apply(cls, original.__get__(None, cls), args, kwargs)
        return original.__get__(None, cls)(*args, **kwargs)

    apply.original = original  # type: ignore[attr-defined]
    return apply


def _recorded_apply(cls: type, apply: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A custom autograd.Function called during the capture: one node of the graph, which calls the Function's own
    ``apply`` when the inner backend traces the core (Note [Custom autograd.Functions in the core])."""

    def call(*args: Any, **kwargs: Any) -> Any:
        previous = getattr(_refusing, "active", False)
        _refusing.active = False  # the forward's own torch calls run unrecorded, on the fakes
        try:
            return apply(*args, **kwargs)
        finally:
            _refusing.active = previous

    call.__name__ = call.__qualname__ = f"{cls.__name__}_apply"
    return record_custom_function(call, args, kwargs, may_run_eagerly=True)
