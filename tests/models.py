"""Small real-world models whose forward returns multi-output views, shared by the tests.

Each model returns (a pytree of) tensors some of which are outputs of one multi-output view call:
- ``MultiTaskTower``: a shared trunk whose last layer is split per task head (``split_with_sizes``) into a dict.
- ``TransformerBlock``: pre-norm block with ``nn.MultiheadAttention``; the fused qkv projection is ``chunk``-ed
  and the q, k, v chunks are returned with the block's output (as a KV cache would keep them).
- ``RecSysModel``: pooled ``EmbeddingBag`` lookups concatenated into one batch (like TorchRec's KeyedTensor),
  an over-arch for the prediction, and the pooled batch split back per feature with ``split_with_sizes`` into
  a dict (``KeyedTensor.to_dict()``).

``make_batch`` and ``loss_fn`` give each model's deterministic inputs and a scalar loss over all outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

TASKS: dict[str, int] = {"ctr": 1, "watch_time": 2, "category": 5}
FEATURES: dict[str, tuple[int, int]] = {"user": (50, 8), "item": (80, 12), "context": (20, 4)}  # rows, dim


class MultiTaskTower(nn.Module):
    def __init__(self, in_features: int = 16, hidden: int = 32, tasks: dict[str, int] = TASKS) -> None:
        super().__init__()
        self.tasks = dict(tasks)
        self.trunk = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.Tanh())
        self.towers = nn.Linear(hidden, sum(self.tasks.values()))
        self.register_buffer("task_scale", torch.linspace(0.5, 1.5, sum(self.tasks.values())))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.towers(self.trunk(x)) * self.task_scale
        return dict(zip(self.tasks, logits.split(list(self.tasks.values()), dim=1)))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        attended, _ = self.attn(q, k, v, need_weights=False)
        h = x + attended
        return h + self.mlp(self.norm2(h)), q, k, v


class RecSysModel(nn.Module):
    def __init__(self, features: dict[str, tuple[int, int]] = FEATURES, dense_in: int = 6) -> None:
        super().__init__()
        self.features = dict(features)
        self.tables = nn.ModuleDict({n: nn.EmbeddingBag(rows, dim, mode="sum") for n, (rows, dim) in features.items()})
        self.dims = [dim for _, dim in features.values()]
        self.bottom = nn.Linear(dense_in, 8)
        self.over = nn.Sequential(nn.Linear(sum(self.dims) + 8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(
        self, dense: torch.Tensor, ids: dict[str, torch.Tensor], offsets: dict[str, torch.Tensor]
    ) -> dict[str, Any]:
        pooled = torch.cat([self.tables[n](ids[n], offsets[n]) for n in self.features], dim=1)
        prediction = self.over(torch.cat([pooled, F.relu(self.bottom(dense))], dim=1)).squeeze(1)
        return {"prediction": prediction, "features": dict(zip(self.features, pooled.split_with_sizes(self.dims, 1)))}


def _generator(step: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + step)


def make_batch(model: nn.Module, step: int, batch: int = 8) -> tuple[Any, ...]:
    """The inputs of ``model`` for one training step: deterministic in ``step``."""
    gen = _generator(step)
    if isinstance(model, MultiTaskTower):
        return (torch.randn(batch, model.trunk[0].in_features, generator=gen),)
    if isinstance(model, TransformerBlock):
        return (torch.randn(batch // 2, 5, model.qkv.in_features, generator=gen),)
    if isinstance(model, RecSysModel):
        ids: dict[str, torch.Tensor] = {}
        offsets: dict[str, torch.Tensor] = {}
        for name, (rows, _) in model.features.items():
            # Bag lengths 1..3 in a per-step order: the total (the ids' size) stays fixed, so no recompiles.
            lengths = (1 + torch.arange(batch) % 3)[torch.randperm(batch, generator=gen)]
            ids[name] = torch.randint(0, rows, (int(lengths.sum()),), generator=gen)
            offsets[name] = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
        return torch.randn(batch, model.bottom.in_features, generator=gen), ids, offsets
    raise TypeError(type(model).__name__)


def _targets(out: Any, step: int) -> Any:
    gen = _generator(10_000 + step)
    return [torch.randn(t.shape, generator=gen) for t in _leaves(out)]


def _leaves(out: Any) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def loss_fn(out: Any, step: int) -> torch.Tensor:
    """Mean squared error of every output against fixed random targets: every output gets a gradient."""
    return sum(F.mse_loss(t, target) for t, target in zip(_leaves(out), _targets(out, step)))  # type: ignore[return-value]


MODELS: dict[str, Callable[[], nn.Module]] = {
    "multi_task_tower": MultiTaskTower,
    "transformer_block": TransformerBlock,
    "recsys": RecSysModel,
}


def make_model(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return MODELS[name]()
