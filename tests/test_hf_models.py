"""compare --models on one tiny Hugging Face model (skipped without transformers: ``pip install -e ".[models]"``).

One 1-layer GPT-2 under eager and the prototype: every returned tensor (logits and the cache's keys and values),
every parameter grad, the alias structure, the in-place behaviour and ten SGD steps must match eager's.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

pytest.importorskip("transformers")

import predispatch_views
from predispatch_views.compare.benchmarks import Settings
from predispatch_views.compare.models import CASES, alias_structure, inplace_behaviour, run_model
from predispatch_views.compare.strategies import eager, prototype

SETTINGS = Settings(torch.device("cpu"), ("aot_eager",), quick=True, min_run_time=0.001, rounds=1,
                    step_cap_s=math.inf, budget_s=0.0)  # fmt: skip


def test_one_layer_gpt2_matches_eager_under_the_prototype() -> None:
    gpt2 = next(c for c in CASES if c.name == "gpt2")
    case = dataclasses.replace(gpt2, config={**gpt2.config, "n_layer": 1})
    predispatch_views.FALLBACKS.clear()
    reference, row = run_model(case, [eager(), prototype("aot_eager")], SETTINGS, warm_up=False)
    assert not reference.error and not row.error, (reference.error, row.error)
    assert reference.n_tensors == row.n_tensors == 3  # logits, and the cache's key and value of the one layer
    assert row.outputs_match and row.grads_match
    assert row.aliasing_as_eager
    assert row.inplace_as_eager == row.n_tensors
    assert row.fallbacks == []
    assert row.graph_breaks == 0
    assert row.train_loss_rel_diff < 1e-5 and row.train_param_max_diff < 1e-5


def test_alias_structure_and_inplace_probe_see_views() -> None:
    base = torch.randn(4, 2, requires_grad=True).mul(2)
    outs = [*base.unbind(0), base.t(), torch.zeros(2)]
    assert alias_structure(outs) == [(True, 0)] * 4 + [(True, 0), (False, 5)]
    behaviour = inplace_behaviour(outs)
    assert behaviour[0].startswith("RuntimeError: Output 0 of Unbind is a view")
    assert behaviour[-1] == "ok"


def test_t5_encoder_output_written_in_place_breaks_the_backward_as_in_eager() -> None:
    """Issue 21, class 4, on the real model (shrunk in tests/test_suite_regressions.py): T5's encoder ends with a
    dropout that returns its input (p=0), which the decoder's cross-attention saves; writing
    ``encoder_last_hidden_state`` in place makes eager's backward raise, and so must the prototype's."""
    import transformers

    t5 = next(c for c in CASES if c.name == "t5")
    config = {**t5.config, "num_layers": 1, "use_cache": False}

    def backward_after_write(compile_: bool) -> str | None:
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = transformers.T5ForConditionalGeneration(transformers.T5Config(**config))
        ids = torch.randint(0, config["vocab_size"], (2, 8))
        call = torch.compile(model, backend=predispatch_views.backend("aot_eager", strict=True)) if compile_ else model
        out = call(input_ids=ids, decoder_input_ids=ids.flip(1), use_cache=False)
        out.encoder_last_hidden_state.mul_(2)
        try:
            out.logits.square().mean().backward()
        except RuntimeError as e:
            return str(e).split(": [")[0]
        return None

    expected = backward_after_write(compile_=False)
    assert expected == "one of the variables needed for gradient computation has been modified by an inplace operation"
    assert backward_after_write(compile_=True) == expected
