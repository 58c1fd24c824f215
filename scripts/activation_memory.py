"""Activation memory: bytes saved for backward by one training forward of each model of the suite (issue 25).

Run from the repository root::

    python scripts/activation_memory.py [--models a,b] [--inner aot_eager] [--output FILE]

Each model (``compare --models``' suite, first shape) runs one forward under eager, stock (``torch.compile`` with
the inner backend) and the prototype (its backend with the same inner backend), inside
``torch.autograd.graph.saved_tensors_hooks``: every tensor autograd saves (eager's nodes, and a compiled
function's ``ctx.save_for_backward``) is counted once per storage, by the storage's bytes. Parameters and inputs
count where they are saved, as in eager. Bytes are deterministic: one run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import predispatch_views as pv
from predispatch_views.compare.model_suite import suite_cases
from predispatch_views.compare.models import loss_of
from predispatch_views.compare.timing import provenance, write_results


def saved_bytes(run: Callable[[], Any]) -> tuple[int, int]:
    """(bytes, tensors) saved for backward by ``run()``, each storage counted once; the outputs are kept alive
    until the count is taken, so nothing saved is freed early."""
    storages: dict[Any, int] = {}
    count = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal count
        count += 1
        s = t.untyped_storage()
        storages[(s.data_ptr(), t.device)] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    total = sum(storages.values())
    loss_of(out).backward()  # the graph is used as training uses it
    return total, count


def measure(case: Any, inner: str) -> dict[str, tuple[int, int]]:
    results = {}
    for label in ("eager", f"stock[{inner}]", f"prototype[{inner}]"):
        torch._dynamo.reset()
        model, inputs = case.build()
        model.train()
        if label == "eager":
            fn = model
        elif label.startswith("stock"):
            fn = torch.compile(model, backend=inner)
        else:
            fn = torch.compile(model, backend=pv.backend(inner))
        fn(**inputs)  # compile (and its own saves) outside the count
        results[label] = saved_bytes(lambda fn=fn, inputs=inputs: fn(**inputs))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma separated names (default: the whole suite)")
    parser.add_argument("--inner", default="aot_eager")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    inner = args.inner
    lines = [
        "# Activation memory: bytes saved for backward",
        "",
        provenance(
            f"python scripts/activation_memory.py --inner {inner}"
            + (f" --models {args.models}" if args.models else "")
            + " --output FILE"
        ),
        "",
        "One training forward per model at the suite's first shape; every tensor autograd saves (eager's nodes and "
        "a compiled function's `save_for_backward`), each storage counted once by its bytes. Ratios to eager.",
        "",
        f"| model | eager KiB | stock[{inner}] KiB | prototype[{inner}] KiB | stock / eager | prototype / eager "
        "| prototype / stock |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    ratios: dict[str, list[float]] = {"stock / eager": [], "prototype / eager": [], "prototype / stock": []}
    for case in suite_cases(args.models):
        try:
            r = measure(case, inner)
        except Exception as e:  # a model the install cannot run here: named, not hidden
            lines.append(f"| {case.name} | raised {type(e).__name__} | | | | | |")
            continue
        e, s, p = (r[k][0] for k in ("eager", f"stock[{inner}]", f"prototype[{inner}]"))
        cells = [f"{x / 1024:.1f}" for x in (e, s, p)]
        if e and s:
            for key, value in zip(ratios, (s / e, p / e, p / s)):
                ratios[key].append(value)
            cells += [f"{s / e:.2f}", f"{p / e:.2f}", f"{p / s:.2f}"]
        else:
            cells += ["", "", ""]
        lines.append(f"| {case.name} | " + " | ".join(cells) + " |")
    if ratios["prototype / stock"]:
        means = [torch.tensor(v).log().mean().exp().item() for v in ratios.values()]
        worst = max(ratios["prototype / stock"])
        lines.append(f"| geometric mean ({len(ratios['prototype / stock'])} models) | | | | "
                     + " | ".join(f"{m:.3f}" for m in means) + " |")  # fmt: skip
        lines += ["", f"Largest prototype / stock: {worst:.2f}."]
    write_results(lines, args.output)


if __name__ == "__main__":
    main()
