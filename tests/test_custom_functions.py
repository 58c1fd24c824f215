"""Custom autograd.Functions in the core (issue 22; Note [Custom autograd.Functions in the core] in capture.py):
the backend keeps each Function as one node with its own backward, and replays the views after it, matching eager
(values, gradients from the user's backward, views, grad_fn types, in-place errors) with no fallback."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import predispatch_views
from predispatch_views import graph_ops
from predispatch_views.compare.fuzz_program import ScaledClone  # saves nothing: its backward reads the gradient
from tests.parity_utils import assert_matches_eager, view_nodes


class ScaleWithOwnGrad(torch.autograd.Function):
    """A backward that is not the forward's derivative: inlining the forward would give other gradients."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * 3

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * 5 + x * 0.5


class SetupContextStyle(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor, k: float) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sin() * k, x.cos()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, k = inputs
        ctx.save_for_backward(x)
        ctx.k = k

    @staticmethod
    def backward(ctx: Any, g_sin: torch.Tensor, g_cos: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        return g_sin * ctx.k * 2 - g_cos * x, None


class NonDifferentiableOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = x > 0
        ctx.mark_non_differentiable(mask)
        ctx.save_for_backward(mask)
        return x * mask, mask

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _: None) -> torch.Tensor:
        (mask,) = ctx.saved_tensors
        return grad * mask * 7


class MarksDirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


class ReturnsItsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 0.5


def own_grad_then_unbind(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return ScaleWithOwnGrad.apply(x.sin()).unbind(0)


def setup_context_then_chunk(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a, b = SetupContextStyle.apply(x, 1.5)
    return (*a.chunk(2, dim=1), b)


def non_differentiable_output_then_split(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y, mask = NonDifferentiableOutput.apply(x.mul(2))
    return (*y.split([1, 2], dim=0), mask)


def mlp_with_a_function_then_heads(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = ScaleWithOwnGrad.apply(x @ w).relu()
    q, k, v = h.unbind(0)
    return q.t(), k * v


PROGRAMS = {
    "own_grad_then_unbind": (own_grad_then_unbind, lambda: [torch.randn(3, 4, requires_grad=True)]),
    "setup_context_then_chunk": (setup_context_then_chunk, lambda: [torch.randn(3, 4, requires_grad=True)]),
    "non_differentiable_output": (
        non_differentiable_output_then_split,
        lambda: [torch.randn(3, 4, requires_grad=True)],
    ),
    "mlp_with_a_function": (
        mlp_with_a_function_then_heads,
        lambda: [torch.randn(3, 2, 5, requires_grad=True), torch.randn(5, 5, requires_grad=True)],
    ),
}


def _seeded(make_inputs: Any) -> Any:
    def make() -> list[torch.Tensor]:
        torch.manual_seed(0)
        return make_inputs()

    return make


def _compiled(fn: Any, entry: str) -> Any:
    # strict: a fallback (to stock, or to eager for compile_function) raises instead.
    if entry == "compile_function":
        return predispatch_views.compile_function(fn, inner="aot_eager", strict=True)
    dynamic = entry == "backend_dynamic"
    return torch.compile(fn, backend=predispatch_views.backend("aot_eager", strict=True), dynamic=dynamic)


ENTRIES = ["backend", "backend_dynamic", "compile_function"]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_custom_function_stays_in_the_core_and_the_views_are_replayed(name: str, entry: str) -> None:
    fn, make_inputs = PROGRAMS[name]
    assert_matches_eager(fn, _compiled(fn, entry), _seeded(make_inputs))


@pytest.mark.parametrize("entry", ENTRIES)
def test_the_users_backward_runs(entry: str) -> None:
    # Had the forward been traced through, the gradient would be 3 cos(x), not (5 + sin(x) / 2) cos(x).
    x = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    outs = _compiled(own_grad_then_unbind, entry)(x)
    torch.autograd.backward(outs, [torch.ones(4, dtype=torch.double)] * 3)
    torch.testing.assert_close(x.grad, (5 + 0.5 * x.detach().sin()) * x.detach().cos())
    assert view_nodes(list(outs)) == view_nodes(list(own_grad_then_unbind(x)))  # one eager UnbindBackward0


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_function_returning_its_input_runs_in_eager_between_compiled_segments(entry: str) -> None:
    """Eager returns the input as a view of it whose grad_fn is the Function's backward; no compiled code makes
    that. The program is cut around the call, which runs uncompiled as Dynamo recorded it (Note [Segments]); the
    views after it are replayed. Under Dynamo this fell back to stock before (its outputs were no views)."""

    def program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = ReturnsItsInput.apply(x.mul(2))
        return (*y.unbind(0), y.sin())

    def make_inputs() -> list[torch.Tensor]:
        return [torch.randn(3, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)]

    assert_matches_eager(program, _compiled(program, entry), make_inputs)


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_function_marking_its_input_dirty_runs_in_eager_between_compiled_segments(entry: str) -> None:
    """ctx.mark_dirty: an in-place write inside the Function, which returns that input with the Function's
    backward as its history. The call runs in eager between two compiled segments (it fell back to stock under the
    backend and ran the whole function eagerly under compile_function before): the unbind outputs are eager's
    views, and the gradient goes through the user's backward."""

    def program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = MarksDirty.apply(x.mul(2))
        return (*y.unbind(0), y.sin())

    def make_inputs() -> list[torch.Tensor]:
        return [torch.randn(3, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)]

    assert_matches_eager(program, _compiled(program, entry), make_inputs)


# Bound once, as libraries do (``op = F.apply`` at import): the call never looks ``apply`` up on the class.
BOUND_APPLIES = {
    "own_grad": ScaleWithOwnGrad.apply,
    "returns_its_input": ReturnsItsInput.apply,
    "marks_dirty": MarksDirty.apply,
    "non_differentiable_output": lambda x: NonDifferentiableOutput.apply(x)[0],  # looked up in the call: recorded
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("name", sorted(BOUND_APPLIES))
def test_a_function_applied_through_a_bound_apply_keeps_its_backward(name: str, entry: str) -> None:
    """A bound ``apply`` calls the original, not the one the capture wraps: compile_function's trace inlined the
    forward and differentiated it (ScaleWithOwnGrad: a silent wrong gradient, 3 where eager's backward gives
    5 + x / 2). The capture now refuses it and the function runs eagerly, with the reason logged; Dynamo sees
    the call itself, so the backend records it."""
    apply = BOUND_APPLIES[name]

    def program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = apply(x.mul(2))
        return (*y.unbind(0), y.sin())

    def make_inputs() -> list[torch.Tensor]:
        return [torch.randn(3, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)]

    bound = name != "non_differentiable_output"
    before = len(predispatch_views.FALLBACKS)
    if entry == "compile_function":
        compiled = predispatch_views.compile_function(program, inner="aot_eager", strict=not bound)
    else:
        compiled = _compiled(program, entry)
    assert_matches_eager(program, compiled, make_inputs)
    reasons = [reason for _, reason in list(predispatch_views.FALLBACKS)[before:]]
    expected = bound and entry == "compile_function"
    assert any("applied through an apply bound before the capture" in r for r in reasons) == expected, reasons


def dead_function_call_then_write(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    t0 = a.cos()
    ReturnsItsInput.apply(b)  # nothing reads it (fuzzer s1291_142)
    t0.mul_(2)  # cut around the call, this write would hit a value handed over
    return t0.unbind(0)


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_function_call_nothing_observes_is_not_cut_around(entry: str) -> None:
    """A Function returning an input whose result nothing reads has no effect eager would show: it stays in the
    core, where AOTAutograd drops it, instead of forcing a cut that the later write refuses (a fallback before)."""

    def make_inputs() -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(0)
        return [torch.randn(2, 3, generator=gen, requires_grad=True), torch.randn(3, generator=gen, requires_grad=True)]

    assert_matches_eager(dead_function_call_then_write, _compiled(dead_function_call_then_write, entry), make_inputs)


def exp_and_a_double_then_marks_dirty(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.exp()
    z = x * 2  # computed in the same compiled segment as exp
    return (*MarksDirty.apply(y).unbind(0), z)


def _eager_error(fn: Any, make_inputs: Any, backward_through: slice) -> str | None:
    outs = fn(*make_inputs())
    try:
        torch.autograd.backward(outs[backward_through], [torch.ones_like(o) for o in outs[backward_through]])
    except RuntimeError as e:
        return str(e)
    return None


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
def test_a_dirty_write_to_a_result_its_producer_saves_is_cut_around_and_watched(entry: str) -> None:
    """The Function's write bumps the version of exp's result, which exp's backward reads. The compiled segment
    before the call saved it in its one node, so a backward through ``z`` alone, which never reaches exp in eager,
    raised there: the cut was refused and the program fell back (stock for the backend, eager for
    compile_function). Now exp's storage is tagged for recomputation in that segment and the segment's watch of
    its result raises eager's own error, message included, where eager's backward reaches exp (segment_savers.py)."""

    def make_inputs() -> list[torch.Tensor]:
        return [torch.randn(3, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)]

    compiled = _compiled(exp_and_a_double_then_marks_dirty, entry)  # strict: no fallback
    for through in (slice(0, 3), slice(3, 4), slice(0, 4)):
        torch._dynamo.reset()
        expected = _eager_error(exp_and_a_double_then_marks_dirty, make_inputs, through)
        assert (expected is None) == (through == slice(3, 4))
        assert _eager_error(compiled, make_inputs, through) == expected
    assert_matches_eager(exp_and_a_double_then_marks_dirty, compiled, make_inputs)


def write_after_a_function_then_marks_dirty(function: Any) -> Any:
    def program(a: torch.Tensor, b: torch.Tensor) -> tuple[Any, ...]:
        t0 = function.apply(b)
        t1 = b.detach()
        t1.mul_(3.0)  # writes b, which ``function`` read, hidden from autograd
        t2 = MarksDirty.apply(a.cos())  # runs in eager between two compiled segments
        return t0.unbind(0), t1, t2

    return program


def _two_inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(3, requires_grad=True, generator=g), torch.randn(3, 2, generator=g, requires_grad=True).mul(1)]


@pytest.mark.parametrize("entry", ["backend", "backend_dynamic"])
def test_a_write_to_what_a_function_read_but_did_not_save_is_cut_around(entry: str) -> None:
    """Note [What a custom Function's backward reads]: the cut before ``MarksDirty`` leaves ``ScaledClone``
    in the compiled segment before it, and ``b`` is written after it. The rules took any Function to save all it
    reads (and the ``getitem`` unpacking its result for a reader too), so the cut was refused and the program went
    to stock, whose gradient of ``b`` differs from eager's (fuzzer s1824_48). Dynamo's backward graph of the
    Function reads nothing of ``b``: the program is cut and matches eager with no fallback."""
    program = write_after_a_function_then_marks_dirty(ScaledClone)
    assert_matches_eager(program, _compiled(program, entry), _two_inputs)


class SavesItsResult(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * y


class StashesAView(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.row = x[0]  # stashed on ctx, not saved: eager checks no version, the backward still reads it
        return x * w

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return grad * 2, grad * ctx.row


@pytest.mark.parametrize(
    "function, reads",
    [
        (ScaledClone, (set(), False)),
        (MarksDirty, (set(), False)),
        (ScaleWithOwnGrad, ({0}, False)),
        (SavesItsResult, (set(), True)),
        (StashesAView, ({0}, False)),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_what_a_functions_backward_reads_is_read_from_dynamos_graphs(function: Any, reads: Any) -> None:
    """Note [What a custom Function's backward reads]: the operands (by position) and whether the result."""
    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    operands = [torch.randn(3, 2, requires_grad=True).mul(1), torch.randn(3, 2, requires_grad=True)]
    nargs = function.forward.__code__.co_argcount - 1
    torch._dynamo.reset()
    torch.compile(lambda *xs: function.apply(*xs[:nargs]) * 2, backend=keep, fullgraph=True)(*operands)
    (node,) = [n for n in graphs[0].graph.nodes if graph_ops.is_function_apply(n)]
    placeholders = list(graphs[0].graph.find_nodes(op="placeholder"))
    found = graph_ops.saved_by_backward(node)
    assert found is not None
    assert ({placeholders.index(n) for n in found[0]}, found[1]) == reads


def _block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w).sin()


def checkpointed_block_then_unbind(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = torch.utils.checkpoint.checkpoint(_block, x, w, use_reentrant=False)
    return y.unbind(0)


def checkpointed_layers_then_heads(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    for _ in range(2):
        x = torch.utils.checkpoint.checkpoint(_block, x, w, use_reentrant=False)
    q, k = x.chunk(2, dim=-1)
    return q, k.t()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize(
    "fn", [checkpointed_block_then_unbind, checkpointed_layers_then_heads], ids=lambda f: f.__name__
)
def test_a_checkpointed_region_stays_in_the_core(fn: Any, dynamic: bool) -> None:
    # Dynamo's tag_activation_checkpoint could not be traced at the pre-dispatch level at all ("KeyError:
    # _checkpoint_context_fn", a fallback); kept as one node, AOTAutograd recomputes it as it does for stock.
    def make_inputs() -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        return [torch.randn(3, 4, generator=g, requires_grad=True), torch.randn(4, 4, generator=g, requires_grad=True)]

    compiled = torch.compile(fn, backend=predispatch_views.backend("aot_eager", strict=True), dynamic=dynamic)
    assert_matches_eager(fn, compiled, make_inputs)


class _FunctionMLP(torch.nn.Module):
    """Linear, the user's own activation (a custom Function with its own backward), Linear."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sin, cos = SetupContextStyle.apply(self.up(x), 1.5)
        return self.down(ScaleWithOwnGrad.apply(sin * cos))


class _CheckpointedModel(torch.nn.Module):
    """Two residual blocks, each checkpointed (non-reentrant) around an MLP with a custom Function; q, k, v heads
    from one projection (``chunk``), and the per-position rows of v (``unbind``): views the caller gets."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([_FunctionMLP(width) for _ in range(2)])
        self.qkv = torch.nn.Linear(width, 3 * width)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        for block in self.blocks:
            x = x + torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return (q, k, *v.unbind(1))


def _train(model: torch.nn.Module, run: Any, lengths: list[int]) -> tuple[list[Any], list[Any]]:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses, structure = [], []
    for step, length in enumerate(lengths):
        x = torch.randn(2, length, 8, generator=torch.Generator().manual_seed(step))
        outs = run(x)
        structure.append([(o._is_view(), type(o.grad_fn).__name__) for o in outs])
        loss = (outs[0] * outs[1]).sum() + sum(v.pow(2).sum() for v in outs[2:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses, structure


def test_a_model_with_a_custom_function_and_checkpointed_layers_trains_under_the_flag_without_fallback() -> None:
    """Issue 22: a tiny model whose MLP calls custom Functions, in checkpointed layers, trains under the flag
    (plain torch.compile, inductor) through two sequence lengths with no fallback: eager's losses and parameters,
    eager's views (chunk and unbind outputs, their grad_fn types)."""
    torch._dynamo.reset()
    eager_model = _CheckpointedModel()
    compiled_model = _CheckpointedModel()
    compiled_model.load_state_dict(eager_model.state_dict())
    lengths = [4, 4, 6, 6]
    expected, eager_structure = _train(eager_model, eager_model, lengths)
    predispatch_views.GRAPHS.clear()
    predispatch_views.FALLBACKS.clear()
    with predispatch_views.enable():
        compiled = torch.compile(compiled_model)
        actual, structure = _train(compiled_model, compiled, lengths)
    assert list(predispatch_views.FALLBACKS) == []
    replayed = [detail for _, outcome, detail in predispatch_views.GRAPHS if outcome == "replayed"]
    assert replayed and all("chunk" in d and "unbind" in d for d in replayed), list(predispatch_views.GRAPHS)
    assert structure == eager_structure
    assert [len(s) for s in structure] == [2 + n for n in lengths] and all(view for s in structure for view, _ in s)
    torch.testing.assert_close(torch.stack(actual), torch.stack(expected), rtol=1e-4, atol=1e-4)
    for p, q in zip(compiled_model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-4)
