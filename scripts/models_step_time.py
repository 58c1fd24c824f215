"""Step time and compile time of the model suite under plain ``torch.compile``, the flag on vs off (issue 24).

Usage (from the repository root)::

    python scripts/models_step_time.py --inner inductor --rounds 7 --output results/models-step-time.md

For each model of ``compare --models``' suite (compare/model_suite.py; tiny configs, no download) the script
compiles the model twice in one process, as a user would: plain ``torch.compile`` (``stock``) and the same with
the experimental flag on (``flag``; compare/models.py ``plain_compile``), static shapes, each on its own copy of
the call. Then ``--rounds`` interleaved rounds (the order rotates each round) time one training step, forward and
backward of the model's loss, on process CPU time with one thread: each round is one ``blocked_autorange`` block
per strategy, and the per-round ratio flag / stock is kept. A model's step ratio is the median of its rounds'
ratios, with their range; the summary gives the geometric mean of the medians and the worst median (issue 24's
targets: at most 1.0 and 1.05). Compile time is the CPU time of the first step (this process and gcc), after an
untimed warm-up compile of the model by stock that pays Dynamo's and inductor's one-time costs; ``stock`` and
``flag`` compile in alternating order from model to model. Each row also says what the flag did (graphs it
replayed, graphs without views, fallbacks) and whether the losses and gradients of the two steps agree.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.utils.benchmark as benchmark

import predispatch_views as pv
from predispatch_views.compare.model_suite import suite_cases
from predispatch_views.compare.models import loss_of, plain_compile
from predispatch_views.compare.timing import (
    benchmark_environment,
    cpu_seconds,
    fresh_copy,
    median_and_range,
    provenance,
    write_results,
)

STRATEGIES = ("stock", "flag")


@dataclass
class ModelTiming:
    model: str
    family: str
    compile_s: dict[str, float] = field(default_factory=dict)
    step_us: dict[str, list[float]] = field(default_factory=dict)
    ratios: list[float] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    fallbacks: list[str] = field(default_factory=list)
    same_step: bool = True
    error: str = ""


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def _first_step(run: Callable[..., Any], model: torch.nn.Module, inputs: dict[str, Any]) -> tuple[float, Any]:
    model.zero_grad(set_to_none=True)
    start = cpu_seconds()
    loss = loss_of(run(**inputs))
    loss.backward()
    return cpu_seconds() - start, (loss.detach(), _grads(model))


def _agree(a: Any, b: Any) -> bool:
    (loss_a, grads_a), (loss_b, grads_b) = a, b
    if len(grads_a) != len(grads_b):
        return False
    pairs = [(loss_a, loss_b), *zip(grads_a, grads_b)]
    return all(torch.allclose(x, y, rtol=1e-4, atol=1e-5) for x, y in pairs)


def time_model(case: Any, rounds: int, inner: str, flag_first: bool) -> ModelTiming:
    row = ModelTiming(case.name, case.family)
    model, inputs = case.build()
    model.train()
    loss_of(model(**inputs)).backward()  # lazy inits in eager
    warm = plain_compile(inner, False).make(fresh_copy(lambda **kw: model(**kw)))
    loss_of(warm(**inputs)).backward()  # Dynamo's and the inner backend's one-time costs, untimed
    # ... but not its compiled code: stock's wrapper has the warm-up's name, so Dynamo would hand stock the frames
    # the warm-up compiled after a graph break (a module's forward) and time only its top frame.
    torch._dynamo.reset()
    runs: dict[str, Callable[..., Any]] = {}
    firsts: dict[str, Any] = {}
    for name in reversed(STRATEGIES) if flag_first else STRATEGIES:
        run = plain_compile(inner, name == "flag").make(fresh_copy(lambda **kw: model(**kw)))
        pv.FALLBACKS.clear()
        pv.GRAPHS.clear()
        row.compile_s[name], firsts[name] = _first_step(run, model, inputs)
        if name == "flag":
            row.fallbacks = [reason for _, reason in dict.fromkeys(pv.FALLBACKS)]
            for _, outcome, _ in pv.GRAPHS:
                row.outcomes[outcome] = row.outcomes.get(outcome, 0) + 1
        runs[name] = run
    row.same_step = _agree(firsts["stock"], firsts["flag"])

    def step(run: Callable[..., Any]) -> None:
        model.zero_grad(set_to_none=True)
        loss_of(run(**inputs)).backward()

    timers = {
        name: benchmark.Timer("step(run)", globals={"step": step, "run": run}, timer=time.process_time)
        for name, run in runs.items()
    }
    numbers: dict[str, int] = {}
    for r in range(rounds):
        order = list(STRATEGIES)[r % 2 :] + list(STRATEGIES)[: r % 2]
        seconds: dict[str, float] = {}
        for name in order:
            if name not in numbers:
                measured = timers[name].blocked_autorange(min_run_time=0.2)
                numbers[name] = measured.number_per_run
            else:
                measured = timers[name].timeit(numbers[name])
            seconds[name] = measured.median
            row.step_us.setdefault(name, []).append(measured.median * 1e6)
        row.ratios.append(seconds["flag"] / seconds["stock"])
    return row


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _rows_of(markdown_text: str) -> list[ModelTiming]:
    """The per-model rows of an earlier output, as timings holding each model's median ratio and compile ratio."""
    rows = []
    for line in markdown_text.split("## Per model", 1)[1].splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) < 9 or not cells[2][:1].isdigit():
            continue
        row = ModelTiming(cells[0], cells[1], ratios=[float(cells[2].split()[0])])
        row.compile_s = {"stock": 1.0, "flag": float(cells[7])}
        for part in cells[8].split(";")[0].split(", "):
            outcome, _, count = part.rpartition(" ")
            row.outcomes[outcome] = int(count)
        rows.append(row)
    return rows


def _noise_control(timed: list[ModelTiming]) -> list[str]:
    """The models whose every graph the flag hands to the inner backend unchanged ("no view outputs" only: the same
    compiled code as stock's, compiled once more) are an A/A control: their spread is this machine's noise, and the
    replayed models' geometric mean is read against theirs."""
    unchanged = [r for r in timed if r.outcomes and set(r.outcomes) == {"no view outputs"}]
    replayed = [r for r in timed if "replayed" in r.outcomes]
    lines = [
        "",
        "## Noise control",
        "",
        'Models the flag leaves unchanged ("no view outputs" on every graph: stock\'s compiled code, compiled again) '
        "against the models with a replayed graph: geometric mean of the step medians (min-max of the medians).",
        "",
        "| models | count | step flag / stock: geometric mean | min | max | compile flag / stock: geometric mean |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, group in (("unchanged (A/A)", unchanged), ("replayed", replayed)):
        if not group:
            continue
        medians = [statistics.median(r.ratios) for r in group]
        compiles = [r.compile_s["flag"] / r.compile_s["stock"] for r in group]
        lines.append(
            f"| {label} | {len(group)} | {_geomean(medians):.3f} | {min(medians):.3f} | {max(medians):.3f} | "
            f"{_geomean(compiles):.3f} |"
        )
    return lines


def markdown(rows: list[ModelTiming], command: str, inner: str, rounds: int) -> list[str]:
    timed = [r for r in rows if not r.error]
    step_medians = [statistics.median(r.ratios) for r in timed]
    compile_ratios = [r.compile_s["flag"] / r.compile_s["stock"] for r in timed]
    worst = max(timed, key=lambda r: statistics.median(r.ratios)) if timed else None
    lines = [
        "# Model suite: step and compile time, the flag vs stock",
        "",
        provenance(command),
        "",
        (__doc__ or "").split("\n\n")[3].replace("\n", " "),
        "",
        "## Summary",
        "",
        "| inner | models timed | step flag / stock: geometric mean | worst model | worst median "
        "| compile flag / stock: geometric mean | models whose steps differ | models with a fallback |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    if timed and worst is not None:
        lines.append(
            f"| {inner} | {len(timed)} | {_geomean(step_medians):.3f} | {worst.model} | "
            f"{statistics.median(worst.ratios):.3f} | {_geomean(compile_ratios):.3f} | "
            f"{sum(not r.same_step for r in timed)} | {sum(bool(r.fallbacks) for r in timed)} |"
        )
    lines += _noise_control(timed)
    lines += [
        "",
        "## Per model",
        "",
        f"Step: median (min-max) of {rounds} rounds' ratios; microseconds per step, the median block of the rounds. "
        "Compile: CPU seconds of the first step (this process and gcc).",
        "",
        "| model | family | step flag / stock | stock step (us) | flag step (us) | stock compile (s) "
        "| flag compile (s) | compile flag / stock | what the flag did | steps agree | error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        if r.error:
            lines.append(f"| {r.model} | {r.family} |  |  |  |  |  |  |  |  | {r.error} |")
            continue
        did = ", ".join(f"{k} {v}" for k, v in sorted(r.outcomes.items())) or "no graph"
        if r.fallbacks:
            did += "; fallbacks: " + "; ".join(r.fallbacks)
        lines.append(
            f"| {r.model} | {r.family} | {median_and_range(r.ratios, 3)} | "
            f"{statistics.median(r.step_us['stock']):.0f} | {statistics.median(r.step_us['flag']):.0f} | "
            f"{r.compile_s['stock']:.2f} | {r.compile_s['flag']:.2f} | "
            f"{r.compile_s['flag'] / r.compile_s['stock']:.2f} | {did} | {'yes' if r.same_step else '**no**'} |  |"
        )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--inner", default="inductor", help="plain torch.compile's inner backend (inductor, aot_eager)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--models", default=None, help="only these models (comma separated)")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument(
        "--noise-control-of", type=Path, default=None, help="add the noise-control table to an existing output, from "
        "its per-model rows (nothing is timed)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.noise_control_of is not None:
        text = args.noise_control_of.read_text()
        head, _, rest = text.partition("\n## Noise control\n")
        if rest:  # an earlier table, replaced
            head += "\n" + rest[rest.index("## Per model") :]
        lines = _noise_control(_rows_of(head))
        args.noise_control_of.write_text(head.replace("\n## Per model", "\n".join(lines[1:]) + "\n\n## Per model", 1))
        return 0
    command = "python scripts/models_step_time.py " + " ".join(argv)
    rows: list[ModelTiming] = []
    with benchmark_environment():
        for i, case in enumerate(suite_cases(args.models)):
            torch._dynamo.reset()
            try:
                row = time_model(case, args.rounds, args.inner, flag_first=i % 2 == 1)
            except Exception as e:  # one model must not lose the table
                row = ModelTiming(case.name, case.family, error=f"{type(e).__name__}: {str(e).splitlines()[0][:120]}")
            rows.append(row)
            ratio = f"{statistics.median(row.ratios):.3f}" if row.ratios else row.error
            print(f"{case.name}: step flag/stock {ratio}", file=sys.stderr, flush=True)
    write_results(markdown(rows, command, args.inner, args.rounds), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
