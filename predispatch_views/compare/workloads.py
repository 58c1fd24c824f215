"""The programs the performance section measures.

Each workload is a program whose outputs come from multi-output view calls (or, for ``single_view``, one
view: the overhead floor), consumed by a loss in eager. ``Workload.instantiate(make, device)`` compiles it
with one strategy's ``make`` and returns the calls the benchmark times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import nn

Make = Callable[[Callable[..., Any]], Callable[..., Any]]


@dataclass
class Instance:
    """One workload compiled by one strategy, with its inputs bound."""

    forward: Callable[[], Any]
    loss: Callable[[Any], torch.Tensor]

    def step(self) -> None:
        """Forward and backward, as a training step would run them."""
        self.loss(self.forward()).backward()


@dataclass(frozen=True)
class Workload:
    name: str
    n_outputs: int  # views the program returns per call (the x axis of the scaling plot)
    description: str
    instantiate: Callable[[Make, torch.device], Instance]
    strategies: tuple[str, ...] | None = None  # strategy names to run (None: all)


def _leaf(*shape: int, device: torch.device) -> torch.Tensor:
    return torch.randn(*shape, device=device, requires_grad=True)


def _stack_sum(outs: Any) -> torch.Tensor:
    # The sum of the outputs' sums, as one eager op: a per-output loss (N sum ops) would add the same
    # O(N) eager time to every strategy and hide the differences being measured (reported separately).
    return torch.stack(list(outs)).sum()


def _sum_of_sums(outs: Any) -> torch.Tensor:
    return torch.stack([o.sum() for o in pytree.tree_leaves(outs)]).sum()


# --- the seed program of the issue: N outputs of one unbind --------------------------------------------


def seed_program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.mul(2).unbind(0)


def seed(n: int, width: int = 256, per_output_loss: bool = False) -> Workload:
    def instantiate(make: Make, device: torch.device) -> Instance:
        x = _leaf(n, width, device=device)
        fn = make(seed_program)
        return Instance(lambda: fn(x), _sum_of_sums if per_output_loss else _stack_sum)

    if per_output_loss:  # a side figure: how a per-output eager loss dilutes the ratios
        description = f"x.mul(2).unbind(0), x ({n}, {width}); loss: one o.sum() per output"
        return Workload("seed_sumloss", n, description, instantiate, ("eager", "stock", "prototype"))
    return Workload("seed", n, f"x.mul(2).unbind(0), x ({n}, {width}); loss stack(outs).sum()", instantiate)


# --- keyed-embedding batch: pooled values times a weight, split into a dict of features ----------------


def kjt(batch: int = 2048, features: int = 128, dim: int = 64) -> Workload:
    keys = [f"f{i}" for i in range(features)]
    sizes = [dim] * features

    def program(values: torch.Tensor, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        return dict(zip(keys, (values * weight).split_with_sizes(sizes, 1)))

    def loss(d: dict[str, torch.Tensor]) -> torch.Tensor:
        # A per-feature term, as a multi-task model would compute; 128 eager ops, the same for every strategy.
        return torch.stack([v.sum() for v in d.values()]).sum()

    def instantiate(make: Make, device: torch.device) -> Instance:
        values = _leaf(batch, features * dim, device=device)
        weight = _leaf(features * dim, device=device)
        fn = make(program)
        return Instance(lambda: fn(values, weight), loss)

    return Workload(
        "kjt",
        features,
        f"(values ({batch}, {features}x{dim}) * weight).split_with_sizes -> dict of {features}",
        instantiate,
    )


# --- attention projection: linear then chunk(3) ----------------------------------------------------------


def qkv(batch: int = 4, seq: int = 64, dim: int = 128) -> Workload:
    def instantiate(make: Make, device: torch.device) -> Instance:
        proj = nn.Linear(dim, 3 * dim, device=device)
        x = _leaf(batch, seq, dim, device=device)

        def program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return proj(x).chunk(3, dim=-1)

        fn = make(program)

        def loss(outs: tuple[torch.Tensor, ...]) -> torch.Tensor:
            q, k, v = outs
            return (q * k + v).sum()

        return Instance(lambda: fn(x), loss)

    return Workload("qkv", 3, f"Linear({dim}, {3 * dim})(x ({batch}, {seq}, {dim})).chunk(3, -1)", instantiate)


# --- one view output: what any strategy costs per call beyond the program itself -------------------------


def single_view(size: int = 16) -> Workload:
    def program(x: torch.Tensor) -> torch.Tensor:
        return x.mul(2).t()

    def instantiate(make: Make, device: torch.device) -> Instance:
        x = _leaf(size, size, device=device)
        fn = make(program)
        return Instance(lambda: fn(x), lambda out: out.sum())

    return Workload("single_view", 1, f"x.mul(2).t(), x ({size}, {size})", instantiate)


# --- a module of layers that each hand 8 views to eager code ---------------------------------------------


class ViewLayer(nn.Module):
    """Linear, then 8 views: chunk(8) on even layers, view + unbind on odd ones."""

    def __init__(self, dim: int, index: int, device: torch.device) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim, device=device)
        self.use_unbind = index % 2 == 1

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.lin(h)
        if self.use_unbind:
            return y.view(y.shape[0], 8, -1).unbind(1)
        return y.chunk(8, dim=-1)


def _call_layer(layer: nn.Module, h: torch.Tensor) -> Any:
    return layer(h)


def layers(n_layers: int = 4, batch: int = 32, dim: int = 256) -> Workload:
    def instantiate(make: Make, device: torch.device) -> Instance:
        # Each layer call is compiled on its own: the eager code between layers is the graph break. One compiled
        # callable for all layers, so every strategy reuses a graph across layers of the same kind.
        stack = [ViewLayer(dim, i, device) for i in range(n_layers)]
        compiled = make(_call_layer)
        x = _leaf(batch, dim, device=device)

        def forward() -> tuple[torch.Tensor, ...]:
            h = x
            parts: tuple[torch.Tensor, ...] = ()
            for i, layer in enumerate(stack):
                parts = compiled(layer, h)
                if i + 1 < len(stack):
                    h = torch.cat([p.relu() for p in parts], dim=-1)  # eager code consuming the 8 views
            return parts

        return Instance(forward, _stack_sum)

    return Workload(
        "layers", 8 * n_layers, f"{n_layers} compiled layers x 8 views (chunk/unbind), eager glue", instantiate
    )


# --- a deep graph with few view outputs: what the extra pre-dispatch trace costs at compile time -----------


def deep_mlp(n_layers: int = 40, batch: int = 32, dim: int = 64) -> Workload:
    def instantiate(make: Make, device: torch.device) -> Instance:
        torch.manual_seed(0)
        mlp = nn.Sequential(*(m for _ in range(n_layers) for m in (nn.Linear(dim, dim, device=device), nn.ReLU())))
        x = _leaf(batch, dim, device=device)

        def program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return mlp(x).chunk(2, dim=-1)

        fn = make(program)
        return Instance(lambda: fn(x), _stack_sum)

    return Workload("deep_mlp", 2, f"{n_layers} x (Linear({dim}, {dim}), ReLU) on ({batch}, {dim}), .chunk(2)",
                    instantiate)  # fmt: skip


def seed_sizes(quick: bool, slow: bool = False) -> tuple[int, ...]:
    """N for the scaling series; the targets are read at 50 and 1000."""
    if quick:
        return (10, 50, 1000)
    return (10, 50, 200, 1000, 3000) if slow else (10, 50, 200, 1000)


def tiny_workloads() -> list[Workload]:
    """Every kind of program at toy sizes: compiled once before timing, so that first-use costs (imports,
    decomposition tables, nn.Module tracing) land on no strategy's compile time."""
    return [seed(4, width=4), kjt(4, 4, 2), qkv(1, 2, 8), single_view(2), layers(2, 2, 16), deep_mlp(2, 2, 4)]


def all_workloads(quick: bool, slow: bool = False) -> list[Workload]:
    """The scaling series first, then the other programs; --quick shrinks the big tensors, not the counts."""
    out = [seed(n) for n in seed_sizes(quick, slow)]
    out += [
        kjt(batch=64 if quick else 2048),
        qkv(),
        single_view(),
        layers(),
        deep_mlp(),
    ]
    if not quick:
        out.append(seed(1000, per_output_loss=True))
    return out
