"""Training through changing lengths (issue 21): a data loader's batches change size, its last batch is smaller.

A tiny causal language model (plain PyTorch) takes one SGD step per shape (2, 16), (3, 11), (1, 7): Dynamo's
automatic dynamic shapes recompile the second shape with symbolic sizes, and batch 1 once more. The model has an
in-place op (``relu_``) and returns the k and v chunks of its fused projection (multi-output views, as a KV
cache), so every recompiled graph takes SymInt inputs, writes in place and returns views: before the engine's
fix, exactly the graphs that crashed with ``BackendCompilerFailed: AttributeError: 'NoneType' object has no
attribute 'cdata'`` (issue 21, class 1). Every step must match eager under the backend and under the
experimental flag: loss, every output, every parameter grad, the outputs' alias structure and eager's in-place
error on a returned chunk. With transformers installed, a one-layer Mixtral (a model that crashed so) does the
same under the backend.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import predispatch_views as pv
from predispatch_views.compare.models import GraphRecorder
from tests.parity_utils import alias_structure, flat_tensors

SHAPES = ((2, 16), (3, 11), (1, 7))  # (batch, tokens)
VOCAB = 32
LR = 0.05


class TinyCausalLM(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(VOCAB, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.mlp_in = nn.Linear(dim, 2 * dim)
        self.mlp_out = nn.Linear(2 * dim, dim)
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.embed(ids)
        batch, length, dim = h.shape
        q, k, v = self.qkv(h).chunk(3, dim=-1)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, length, self.heads, dim // self.heads).transpose(1, 2)

        attended = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        h = h + attended.transpose(1, 2).reshape(batch, length, dim)
        hidden = self.mlp_in(h)
        hidden.relu_()  # the in-place op: a recompiled graph with SymInt inputs writes in place
        h = h + self.mlp_out(hidden)
        # log_softmax: eager's logits of a 3-d linear are a view of its 2-d matmul, which stock and the prototype
        # both return as a plain tensor (an output aliasing an intermediate); that is not what this test is about.
        return F.log_softmax(self.head(h), -1), k, v  # k, v: chunks of one call, as a KV cache keeps them


def batch(shape: tuple[int, int]) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(shape[0] * 100 + shape[1]))


def loss_of(outputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return sum(t.float().square().mean() for t in outputs)  # type: ignore[return-value]


def inplace_error(t: torch.Tensor) -> str | None:
    try:
        t.mul_(2)
    except RuntimeError as e:
        return str(e)
    return None


def train_through_lengths(model: nn.Module, forward: Callable[..., Any], call: Callable[..., Any]) -> list[dict]:
    """One SGD step per shape; per step: loss, outputs, alias structure, grads, and the in-place error of a
    returned chunk of a fresh call. ``call(forward, *args)`` makes each call (the flag wraps it)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    steps = []
    for shape in SHAPES:
        ids = batch(shape)
        optimizer.zero_grad(set_to_none=True)
        outputs = call(forward, ids)
        record: dict[str, Any] = {
            "outputs": [t.detach().clone() for t in outputs],
            "alias": alias_structure([ids], flat_tensors(outputs)),
        }
        loss = loss_of(outputs)
        loss.backward()
        record["loss"] = loss.item()
        record["grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
        optimizer.step()
        record["inplace"] = inplace_error(call(forward, ids)[1])
        steps.append(record)
    return steps


def assert_steps_match(actual: list[dict], expected: list[dict]) -> None:
    assert len(actual) == len(expected) == len(SHAPES)
    for shape, a, e in zip(SHAPES, actual, expected):
        torch.testing.assert_close(a["loss"], e["loss"], rtol=1e-4, atol=1e-5, msg=f"loss at {shape}")
        torch.testing.assert_close(a["outputs"], e["outputs"], rtol=1e-4, atol=1e-5, msg=f"outputs at {shape}")
        torch.testing.assert_close(a["grads"], e["grads"], rtol=1e-4, atol=1e-5, msg=f"grads at {shape}")
        assert a["alias"] == e["alias"], shape
        assert a["inplace"] == e["inplace"], shape


def plain_call(forward: Callable[..., Any], *args: Any) -> Any:
    return forward(*args)


def flag_call(forward: Callable[..., Any], *args: Any) -> Any:
    with pv.enable():  # read at every (re)compile
        return forward(*args)


@pytest.fixture(scope="module")
def eager_steps() -> list[dict]:
    torch.manual_seed(0)
    model = TinyCausalLM()
    return train_through_lengths(model, model, plain_call)


def test_eager_reference_is_what_the_test_claims(eager_steps: list[dict]) -> None:
    """The reference the others are held to: the chunk is a multi-output view, and training moves."""
    assert "Output 1 of Split is a view" in (eager_steps[0]["inplace"] or "")
    assert eager_steps[0]["alias"][1][0] and eager_steps[0]["alias"][1][1] == eager_steps[0]["alias"][2][1]
    assert eager_steps[0]["grads"]["qkv.weight"].abs().sum() > 0
    assert eager_steps[1]["loss"] != eager_steps[0]["loss"]


def test_backend_trains_through_changing_lengths_as_eager(eager_steps: list[dict]) -> None:
    torch.manual_seed(0)
    model = TinyCausalLM()
    recorder = GraphRecorder()
    forward = torch.compile(model, backend=recorder.wrap(pv.backend("aot_eager", strict=True)))
    assert_steps_match(train_through_lengths(model, forward, plain_call), eager_steps)
    # The dynamic path really ran: static (2, 16), symbolic (3, 11), and batch 1 specialized (Dynamo's 0/1 rule).
    assert (recorder.graphs, recorder.symbolic_graphs) == (3, 2)


@pytest.mark.slow  # inductor compiles three graphs and their backwards: minutes on 2 shared cores
def test_flag_trains_through_changing_lengths_as_eager(eager_steps: list[dict]) -> None:
    torch.manual_seed(0)
    model = TinyCausalLM()
    pv.FALLBACKS.clear()
    steps = train_through_lengths(model, torch.compile(model), flag_call)
    assert list(pv.FALLBACKS) == []
    assert_steps_match(steps, eager_steps)


def test_a_copy_of_the_model_really_differs_after_training(eager_steps: list[dict]) -> None:
    """Guards the comparisons above: the three steps change the parameters."""
    torch.manual_seed(0)
    model = TinyCausalLM()
    before = copy.deepcopy(model.state_dict())
    train_through_lengths(model, model, plain_call)
    assert all(not torch.equal(p, before[n]) for n, p in model.named_parameters())


@pytest.mark.slow
def test_one_layer_mixtral_trains_through_changing_lengths_under_the_backend() -> None:
    """compare --models' changing-lengths steps on a one-layer Mixtral (eager, stock, the backend)."""
    pytest.importorskip("transformers")
    import dataclasses

    from predispatch_views.compare.models import CASES, lengths_strategies, run_lengths

    mixtral = next(c for c in CASES if c.name == "mixtral")
    case = dataclasses.replace(mixtral, config={**mixtral.config, "num_hidden_layers": 1})
    model, _ = case.build()
    model.train()
    rows = run_lengths(case, model, copy.deepcopy(model.state_dict()), lengths_strategies(("aot_eager",), False), [])
    by_label = {r.strategy: r for r in rows}
    prototype = by_label["prototype[aot_eager]"]
    assert [x.error for x in prototype.lengths] == ["", "", ""]
    assert [x.mismatches for x in prototype.lengths] == [[], [], []]
    assert [x.fallbacks for x in prototype.lengths] == [[], [], []]
    assert sum(x.symbolic_graphs for x in prototype.lengths) >= 1
