"""Training: 20 SGD steps of each model in tests/models.py, compiled, against eager and stock.

Losses and parameters must match eager (and stock) within tolerance at every step, the prototype must keep the
outputs' eager autograd graph (multi-output view nodes, not CompiledFunctionBackward), and the loop must not
recompile per step.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch._dynamo.backends.registry import lookup_backend

import predispatch_views as pv
from predispatch_views.compare.stress import CountingBackend
from tests.models import MODELS, loss_fn, make_batch, make_model
from tests.parity_utils import alias_structure, flat_tensors

STEPS = 20
LR = 0.05
# Every batch of a model has the same shapes (recsys: bag lengths are permuted, their total is fixed): one graph.
GRAPHS = 1


def train(model: nn.Module, forward: Callable[..., Any], steps: int = STEPS) -> tuple[list[float], list[Any]]:
    """Plain SGD; returns the loss of every step and the last step's outputs (for their autograd graph)."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses: list[float] = []
    out: Any = None
    for step in range(steps):
        out = forward(*make_batch(model, step))
        loss = loss_fn(out, step)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, flat_tensors(out)


def _run(name: str, backend: Any | None) -> tuple[list[float], list[torch.Tensor], nn.Module]:
    model = make_model(name)
    forward = model if backend is None else torch.compile(model, backend=backend)
    losses, outs = train(model, forward)
    return losses, outs, model


def _assert_same_training(
    actual: tuple[list[float], Any, nn.Module], expected: tuple[list[float], Any, nn.Module]
) -> None:
    torch.testing.assert_close(actual[0], expected[0], rtol=1e-4, atol=1e-5)
    params_e = dict(expected[2].named_parameters())
    for n, p in actual[2].named_parameters():
        torch.testing.assert_close(p, params_e[n], rtol=1e-4, atol=1e-5, msg=n)


def _assert_eager_autograd_graph(outs: list[torch.Tensor], eager_outs: list[torch.Tensor]) -> None:
    """Per output: view or not, of which shared base, requires_grad, leaf, grad_fn type."""
    assert alias_structure([], outs) == alias_structure([], eager_outs)


@pytest.fixture(scope="module")
def eager_runs() -> dict[str, tuple[list[float], list[torch.Tensor], nn.Module]]:
    return {name: _run(name, None) for name in MODELS}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_matches_eager_and_stock_with_aot_eager(
    name: str, eager_runs: dict[str, tuple[list[float], list[torch.Tensor], nn.Module]]
) -> None:
    expected = eager_runs[name]

    torch._dynamo.reset()
    stock_backend = CountingBackend(lookup_backend("aot_eager"))
    stock = _run(name, stock_backend)
    torch._dynamo.reset()
    backend = CountingBackend(pv.backend("aot_eager", strict=True))
    prototype = _run(name, backend)

    _assert_same_training(stock, expected)
    _assert_same_training(prototype, expected)
    _assert_eager_autograd_graph(prototype[1], expected[1])
    # Stock hides the aliasing; the prototype gives every split/chunk output eager's multi-output view node.
    assert alias_structure([], stock[1]) != alias_structure([], expected[1])
    # Not one graph per step.
    assert backend.graphs == stock_backend.graphs <= GRAPHS


def test_training_with_inductor(eager_runs: dict[str, tuple[list[float], list[torch.Tensor], nn.Module]]) -> None:
    name = "recsys"
    backend = CountingBackend(pv.backend("inductor", strict=True))
    prototype = _run(name, backend)
    _assert_same_training(prototype, eager_runs[name])
    _assert_eager_autograd_graph(prototype[1], eager_runs[name][1])
    assert backend.graphs <= GRAPHS


def test_parameters_really_change() -> None:
    """Guards the comparison above against a loop that leaves parameters untouched."""
    model = make_model("transformer_block")
    before = copy.deepcopy(model.state_dict())
    train(model, torch.compile(model, backend=pv.backend("aot_eager", strict=True)), steps=2)
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert len(changed) == len(list(model.parameters()))


def test_split_outputs_in_place_update_after_step_is_eagers_error() -> None:
    """A training loop that post-processes an output in place hits eager's multi-output view error."""
    errors = []
    for compile_ in (False, True):
        model = make_model("multi_task_tower")
        forward = torch.compile(model, backend=pv.backend("aot_eager", strict=True)) if compile_ else model
        out = forward(*make_batch(model, 0))
        try:
            out["ctr"].sigmoid_()
        except RuntimeError as e:
            errors.append(str(e))
        else:
            errors.append(None)
    assert errors[0] is not None and "Output 0 of SplitWithSizes" in errors[0]
    assert errors[1] == errors[0]
