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
