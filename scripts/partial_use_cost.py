"""The price of fidelity when a program uses part of a multi-output view (issue 24, design/05).

Run from the repository root::

    python scripts/partial_use_cost.py --inner aot_eager,inductor --runs 3 [--rows 2048] [--output FILE]

``one row`` returns ``x.sin().unbind(0)[0]``: in eager the row is a view whose ``_base`` is the whole ``sin(x)``,
so eager computes every row, and so does the prototype, which replays eager's ``unbind``. Stock returns a fresh
tensor; inductor then computes the one row alone. ``all rows`` returns every row, where no strategy can skip work.
Strategies, each compiled on its own copy in one process: eager, Dynamo's floor (``backend="eager"``), stock
(``backend=inner``) and the prototype. Each run times forward+backward (a sum of the returned rows) in
interleaved rounds (best block of ``Timer.blocked_autorange`` per strategy, process CPU time, one thread); the
table gives the median over runs and the range. The ``_base`` column says what the returned row's ``_base`` is
under each strategy: the observable fact that makes eager's work necessary.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from predispatch_views.compare.strategies import Strategy, dynamo_eager, eager, prototype, stock
from predispatch_views.compare.timing import (
    benchmark_environment,
    best_of_interleaved_rounds,
    fresh_copy,
    median_and_range,
    provenance,
    write_results,
)


def one_row(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (x.sin().unbind(0)[0],)


def all_rows(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.sin().unbind(0)


PROGRAMS: dict[str, Callable[[torch.Tensor], tuple[torch.Tensor, ...]]] = {"one row": one_row, "all rows": all_rows}


def _step(strategy: Strategy, program: Callable[..., tuple[torch.Tensor, ...]], rows: int) -> Callable[[], None]:
    fn = strategy.make(fresh_copy(program))
    x = torch.randn(rows, 256, requires_grad=True)

    def step() -> None:
        torch.autograd.backward([o.sum() for o in fn(x)])
        x.grad = None

    for _ in range(3):  # compile, then warm
        step()
    return step


def base_of_first_output(strategy: Strategy, program: Callable[..., tuple[torch.Tensor, ...]], rows: int) -> str:
    out = strategy.make(fresh_copy(program))(torch.randn(rows, 256, requires_grad=True))[0]
    return "none (not a view)" if out._base is None else f"{tuple(out._base.shape)}"


def one_run(
    strategies: dict[str, Strategy],
    program: Callable[..., tuple[torch.Tensor, ...]],
    rows: int,
    rounds: int,
    min_run_time: float,
) -> dict[str, float]:
    torch._dynamo.reset()
    steps = {label: _step(s, program, rows) for label, s in strategies.items()}
    return best_of_interleaved_rounds(steps, rounds, min_run_time)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inner", default="aot_eager,inductor")
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-run-time", type=float, default=0.2)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    command = "python scripts/partial_use_cost.py " + " ".join(sys.argv[1:])
    lines = [
        "# The price of fidelity: a partial use of a multi-output view",
        "",
        provenance(command),
        "",
        f"x ({args.rows}, 256); forward+backward of the returned rows' sum; torch {torch.__version__}, CPU, one "
        f"thread; {args.runs} runs x {args.rounds} interleaved rounds, process CPU time. Cells: median over runs "
        "(min-max), microseconds. `_base`: the returned row's `_base` (eager's is the whole `sin(x)`).",
        "",
        "| inner | program | eager | floor | stock | prototype | prototype / stock | prototype / eager "
        "| `_base`: eager / stock / prototype |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    with benchmark_environment():
        for inner in args.inner.split(","):
            strategies = {"eager": eager(), "floor": dynamo_eager(), "stock": stock(inner),
                          "prototype": prototype(inner)}  # fmt: skip
            for name, program in PROGRAMS.items():
                runs = [
                    one_run(strategies, program, args.rows, args.rounds, args.min_run_time) for _ in range(args.runs)
                ]
                bases = " / ".join(base_of_first_output(strategies[s], program, args.rows)
                                   for s in ("eager", "stock", "prototype"))  # fmt: skip
                cells = [inner, name]
                cells += [median_and_range([r[label] * 1e6 for r in runs], 0) for label in strategies]
                for reference in ("stock", "eager"):
                    cells.append(median_and_range([r["prototype"] / r[reference] for r in runs], bold=True))
                lines.append("| " + " | ".join([*cells, bases]) + " |")
                print(lines[-1], flush=True)
    write_results(lines, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
