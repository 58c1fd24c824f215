"""What the saved-alias separation and its watches cost a training step (issue 24's price of fidelity).

Usage (from the repository root)::

    python scripts/saved_alias_cost.py --models bloom,opt,bart,vit --rounds 9 --output results/saved-alias-cost.md

Note [A saved alias of a value the caller can write] (saved_aliases.py): a core output whose alias the compiled
backward saves (bloom's key and value caches, which attention's ``bmm`` saves) is returned through ``alias`` (so
AOTAutograd hands it back with a version counter of its own) and watched by a pre-hook (version_watches.py), so
that a caller's in-place write raises eager's error where eager's backward reaches the saver, and nowhere else.
For each model the script compiles plain ``torch.compile`` three times in one process (``--inner``, inductor by
default): ``stock``, the flag, and the flag with that separation switched off (``unseparated``: the core returns
the value itself and nothing is watched, which is unfaithful; it exists here only to measure the difference). Then
``--rounds`` interleaved rounds (the order rotates each round) time ``--number`` training steps per strategy on
process CPU time with one thread; a model's ratio is the median of its rounds' ratios to stock, with their range.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.utils.benchmark as benchmark

import predispatch_views.slicing as slicing
from predispatch_views.compare.model_suite import suite_cases
from predispatch_views.compare.models import loss_of, plain_compile
from predispatch_views.compare.timing import (
    benchmark_environment,
    fresh_copy,
    median_and_range,
    provenance,
    write_results,
)

STRATEGIES = ("stock", "flag", "unseparated")


def time_model(name: str, inner: str, rounds: int, number: int) -> dict[str, list[float]]:
    """Seconds per step of each strategy, one value per round."""
    (case,) = suite_cases(name)
    model, inputs = case.build()
    model.train()
    loss_of(model(**inputs)).backward()  # lazy inits in eager
    separate = slicing.separate_saved_aliases
    runs = {}
    try:
        for strategy in STRATEGIES:
            if strategy == "unseparated":
                slicing.separate_saved_aliases = lambda graph, returned, *rest: (returned, ())
            runs[strategy] = plain_compile(inner, strategy != "stock").make(fresh_copy(lambda **kw: model(**kw)))
            loss_of(runs[strategy](**inputs)).backward()  # compiled here, with the separation as chosen
    finally:
        slicing.separate_saved_aliases = separate

    def step(run: object) -> None:
        model.zero_grad(set_to_none=True)
        loss_of(run(**inputs)).backward()  # type: ignore[operator]

    seconds: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    for r in range(rounds):
        for strategy in STRATEGIES[r % 3 :] + STRATEGIES[: r % 3]:
            timer = benchmark.Timer("step(run)", globals={"step": step, "run": runs[strategy]}, timer=time.process_time)
            seconds[strategy].append(timer.timeit(number).median)
    return seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", default="bloom,opt,bart,vit")
    parser.add_argument("--inner", default="inductor", help="plain torch.compile's inner backend")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--number", type=int, default=300, help="steps per timed block")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    lines = [
        "# What the saved-alias separation costs a training step",
        "",
        provenance("python scripts/saved_alias_cost.py " + " ".join(argv)),
        "",
        (__doc__ or "").split("\n\n")[3].replace("\n", " "),
        "",
        "## Price",
        "",
        "| model | stock step (us) | flag / stock | unseparated / stock | flag - unseparated (us per step) |",
        "|---|---:|---:|---:|---:|",
    ]
    with benchmark_environment():
        for name in args.models.split(","):
            if not suite_cases(name):  # a transformers model without transformers installed
                print(f"{name}: not available in this install, skipped", file=sys.stderr, flush=True)
                continue
            torch._dynamo.reset()
            s = time_model(name, args.inner, args.rounds, args.number)
            ratio = {k: [a / b for a, b in zip(s[k], s["stock"])] for k in ("flag", "unseparated")}
            price = statistics.median(a - b for a, b in zip(s["flag"], s["unseparated"])) * 1e6
            lines.append(
                f"| {name} | {statistics.median(s['stock']) * 1e6:.0f} | {median_and_range(ratio['flag'], 3)} | "
                f"{median_and_range(ratio['unseparated'], 3)} | {price:.0f} |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
    write_results(lines, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
