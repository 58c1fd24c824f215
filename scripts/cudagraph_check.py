"""CUDA graph trees with the prototype: ``torch.compile(fn, mode="reduce-overhead")`` under the experimental flag.

    python scripts/cudagraph_check.py [--device cuda] [--out DIR]      (run by scripts/gpu_bench.sh)

The epilogue runs outside the CUDA graph, on the graph-owned output memory, as stock's alias regeneration does.
This checks, against eager and against stock ``mode="reduce-overhead"`` on the same device:
- 3 training steps of a small model whose outputs are unbind/chunk views: losses, parameters and the outputs'
  view nodes (eager's UnbindBackward0/SplitBackward0 for the prototype);
- whether the graphs really ran as CUDA graphs (inductor's ``cudagraph_skips`` counter, 0 expected on cuda);
- what reading the previous step's outputs does after the next step overwrote graph-owned memory: the
  prototype must behave as stock does (both raise, or neither).
Writes DIR/cudagraphs.json and exits 1 if a parity check fails. On ``--device cpu`` inductor skips CUDA graphs
(the counter says so); that only tests the script.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import predispatch_views as pv
from predispatch_views import _torch_internals as ti

STEPS = 3


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = torch.tanh(self.a(x))
        y = self.b(h)
        return (*y.chunk(2, dim=1), *h.unbind(0))


def _grad_fns(outs: tuple[torch.Tensor, ...]) -> list[str]:
    return [type(o.grad_fn).__name__ for o in outs]


def train(device: str, compile_: Callable[[nn.Module], Callable[..., Any]] | None) -> dict[str, Any]:
    torch._dynamo.reset()
    skips_before = ti.compile_counters()["cudagraph_skips"]
    pv.FALLBACKS.clear()
    torch.manual_seed(0)
    model = Model().to(device)
    forward = compile_(model) if compile_ is not None else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, previous, grad_fns = [], None, []
    stale_read: Any = None
    for step in range(STEPS):
        torch.compiler.cudagraph_mark_step_begin()
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(step)).to(device)
        outs = forward(x)
        if previous is not None and stale_read is None:
            try:
                stale_read = ("ok", float(previous[0].detach().sum()))
            except Exception as e:
                stale_read = ("raised", type(e).__name__, str(e).splitlines()[0][:200])
        loss = sum((o * (i + 1)).square().mean() for i, o in enumerate(outs))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        grad_fns = _grad_fns(outs)
        previous = outs
    return {
        "losses": losses,
        "params": [p.detach().cpu() for p in model.parameters()],
        "grad_fns": grad_fns,
        "stale_read": stale_read,
        "cudagraph_skips": ti.compile_counters()["cudagraph_skips"] - skips_before,
        "fallbacks": [reason for _, reason in pv.FALLBACKS],
    }


def prototype(model: nn.Module) -> Callable[..., Any]:
    compiled = torch.compile(model, mode="reduce-overhead")

    def call(*args: Any) -> Any:
        with pv.enable():  # the flag is read when Dynamo compiles: the first call
            return compiled(*args)

    return call


def stock(model: nn.Module) -> Callable[..., Any]:
    return torch.compile(model, mode="reduce-overhead")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default="results/gpu/cudagraphs")
    args = parser.parse_args(argv)

    eager = train(args.device, None)
    runs = {"stock": train(args.device, stock), "prototype": train(args.device, prototype)}
    failures = []
    for name, run in runs.items():
        try:
            torch.testing.assert_close(run["losses"], eager["losses"], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(run["params"], eager["params"], rtol=1e-4, atol=1e-5)
        except AssertionError as e:
            failures.append(f"{name}: training differs from eager: {e}")
    if runs["prototype"]["fallbacks"]:
        failures.append(f"prototype fell back: {runs['prototype']['fallbacks']}")
    if args.device == "cuda" and any(run["cudagraph_skips"] for run in runs.values()):
        failures.append("inductor skipped CUDA graphs (see cudagraph_skips): the check did not exercise them")
    if runs["prototype"]["grad_fns"] != eager["grad_fns"]:
        failures.append(f"prototype grad_fns {runs['prototype']['grad_fns']} != eager {eager['grad_fns']}")
    stale = {name: run["stale_read"] for name, run in runs.items()}
    if stale["prototype"][0] != stale["stock"][0]:
        failures.append(f"reading the last step's outputs: prototype {stale['prototype']} vs stock {stale['stock']}")

    report = {
        "device": args.device,
        "torch": torch.__version__,
        "eager": {k: eager[k] for k in ("losses", "grad_fns", "stale_read")},
        **{name: {k: v for k, v in run.items() if k != "params"} for name, run in runs.items()},
        "failures": failures,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cudagraphs.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
