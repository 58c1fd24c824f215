"""One rank of the 2-process gloo run of tests/test_distributed.py: ``python -m tests.dist_worker RANK STORE OUT``.

Every scenario runs eager and compiled with the prototype (``backend=predispatch_views.backend("aot_eager")``,
passed as a callable: see the module docstring of test_distributed.py; ``PV_INNER`` picks another inner backend)
in the same process, and records what a
user observes; the parent test compares them. Nothing is asserted here, so a failure shows as a readable diff in
the parent, and a rank that raises still writes what it has (the other rank would otherwise hang in a
collective; the parent kills both at its timeout).

Scenarios (each with ``torch._dynamo.reset()`` between runs):
- ``ddp_one_bucket``: a small model under DDP (all parameters in one bucket: DDPOptimizer leaves one graph).
- ``ddp_buckets``: wider layers and ``bucket_cap_mb=1``: DDPOptimizer splits the graph into one submodule per
  bucket, each compiled by the prototype; the views come out of the last one.
- ``fsdp2``: ``fully_shard`` on each layer and the root, on a 2-rank CPU mesh.
- ``dtensor_*``: a compiled function of a DTensor input returning views of it and of an intermediate.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import predispatch_views as pv
from predispatch_views.pipeline import CompiledProgram, compile_dynamo_graph
from tests.parity_utils import alias_structure, outcome, view_nodes

STEPS = 3
LR = 0.02
# The prototype's inner backend: aot_eager by default, PV_INNER=inductor for the slow variant.
INNER = os.environ.get("PV_INNER", "aot_eager")


class SplitModel(nn.Module):
    """Outputs: chunk of the last layer, a split of one chunk, and the unbind of a hidden activation."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.inp = nn.Linear(8, width)
        self.hidden = nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])
        self.narrow = nn.Linear(width, 12)
        self.out = nn.Linear(12, 12)

    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        h = torch.tanh(self.narrow(torch.relu(self.hidden(torch.relu(self.inp(x))))))
        p, q = self.out(h).chunk(2, dim=1)
        return p, q.split([2, 4], dim=1), h.unbind(0)


class RecordingBackend:
    """The prototype, keeping what it did with each graph Dynamo (or DDPOptimizer) hands it."""

    def __init__(self) -> None:
        self.programs: list[CompiledProgram] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        program = compile_dynamo_graph(gm, example_inputs, INNER)
        self.programs.append(program)
        return program.run

    def summary(self) -> list[dict[str, Any]]:
        return [
            {"epilogue": p.epilogue_source, "fallback": p.fallback_reason, "notes": list(p.notes)}
            for p in self.programs
        ]


def _flat(out: Any) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _loss(outs: list[torch.Tensor]) -> torch.Tensor:
    return sum((o.float() * (i + 1)).square().mean() for i, o in enumerate(outs))  # type: ignore[return-value]


def _batch(rank: int, step: int) -> torch.Tensor:
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(100 * step + rank))


def _full(t: torch.Tensor) -> torch.Tensor:
    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    return full.detach().clone()


def _train(wrap: Callable[[nn.Module], nn.Module], width: int, depth: int, compiled: bool) -> dict[str, Any]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = SplitModel(width, depth)
    wrapped = wrap(model)
    backend = RecordingBackend()
    forward = torch.compile(wrapped, backend=backend) if compiled else wrapped
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    outs: list[torch.Tensor] = []
    for step in range(STEPS):
        outs = _flat(forward(_batch(dist.get_rank(), step)))
        loss = _loss(outs)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())

    def mutate_unbind_output() -> None:
        outs[-1].mul_(2)

    def mutate_split_output() -> None:
        outs[2].add_(1)

    return {
        "losses": losses,
        "params": {n: _full(p) for n, p in model.named_parameters()},
        "aliases": alias_structure([], outs),
        "view_nodes": view_nodes(outs),
        "mutate_unbind_output": outcome(mutate_unbind_output),
        "mutate_split_output": outcome(mutate_split_output),
        "programs": backend.summary(),
        "optimize_ddp": torch._dynamo.config.optimize_ddp,
    }


def _ddp(bucket_cap_mb: float) -> Callable[[nn.Module], nn.Module]:
    from torch.nn.parallel import DistributedDataParallel

    return lambda m: DistributedDataParallel(m, bucket_cap_mb=bucket_cap_mb)


def _fsdp2(model: nn.Module) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in (model.inp, *model.hidden, model.narrow, model.out):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def dtensor_program(d: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = d * 2 + 1
    return (*y.unbind(1), *d.chunk(2, dim=0))


def _dtensor(placement_name: str, compiled: bool) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    torch._dynamo.reset()
    pv.FALLBACKS.clear()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    placement = {"shard0": Shard(0), "replicate": Replicate()}[placement_name]
    backend = RecordingBackend()
    fn = torch.compile(dtensor_program, backend=backend) if compiled else dtensor_program

    def make() -> torch.Tensor:
        return distribute_tensor(torch.arange(24.0).reshape(4, 6), mesh, [placement]).requires_grad_()

    d = make()
    outs = fn(d)
    d2 = make()
    sum((o * (i + 1)).sum() for i, o in enumerate(fn(d2))).backward()

    def mutate_output() -> None:
        fn(make())[0].mul_(2)

    return {
        "types": [type(o).__name__ for o in outs],
        "placements": [tuple(o.placements) for o in outs],
        "values": [_full(o) for o in outs],
        "local_is_view": [o.to_local()._is_view() for o in outs],
        "aliases": alias_structure([d], outs),
        "view_nodes": view_nodes(outs),
        "grad": _full(d2.grad),
        "mutate_output": outcome(mutate_output),
        "programs": backend.summary(),
        "fallbacks": list(pv.FALLBACKS),
    }


def scenarios() -> dict[str, Callable[[bool], dict[str, Any]]]:
    """In the order the test runs them (see main() for why the Replicate DTensor program comes first)."""
    return {
        "dtensor_replicate": lambda c: _dtensor("replicate", c),
        "dtensor_shard0": lambda c: _dtensor("shard0", c),
        # Under 1 MB of parameters: DDP's (and DDPOptimizer's) first bucket holds them all.
        "ddp_one_bucket": lambda c: _train(_ddp(25), width=16, depth=1, compiled=c),
        # 1 MB hidden layers, 1 MB buckets (DDPOptimizer requires bucket_cap >= its 1 MB first bucket).
        "ddp_buckets": lambda c: _train(_ddp(1), width=512, depth=3, compiled=c),
        "fsdp2": lambda c: _train(_fsdp2, width=16, depth=1, compiled=c),
    }


def main(rank: int, store: str, out: str, names: list[str]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    results: dict[str, Any] = {}
    try:
        for name in names:
            # Compiled first, and the Replicate DTensor program before any other DTensor run: compiling it after
            # a DTensor program ran in this process (eager or compiled) fails in AOTAutograd's partitioner, for
            # stock aot_eager too ("Node tangents_2 was invalid, but is output"); see design/06's interactions.
            results[name] = {mode: scenarios()[name](mode == "compiled") for mode in ("compiled", "eager")}
            torch.save(results, out)
    except Exception:
        results["error"] = traceback.format_exc()
        torch.save(results, out)
        raise
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].split(",") if len(sys.argv) > 4 else list(scenarios()))
