"""Merge the rows of several ``compare --models`` runs (each folder's models_rows.pkl) into one models.md,
fallbacks.md and models.csv: the suite split over processes (``--models-only`` lists) reads as one run.

    python scripts/merge_model_runs.py OUT RUN_DIR [RUN_DIR ...] [--inner aot_eager] [--flag-inner aot_eager]
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
from pathlib import Path

import torch

from predispatch_views.compare.benchmarks import Settings
from predispatch_views.compare.model_suite import step_shapes
from predispatch_views.compare.models import ModelRow, render_models, write_csv


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--inner", default="aot_eager", help="the runs' --models-inner (none: no backend rows)")
    parser.add_argument("--flag-inner", default="aot_eager", help="the runs' --models-flag-inner")
    parser.add_argument("--steps", type=int, default=10, help="the runs' --models-steps")
    args = parser.parse_args(argv)
    rows: list[ModelRow] = []
    seen: set[str] = set()
    for run in args.runs:
        loaded: list[ModelRow] = pickle.loads((Path(run) / "models_rows.pkl").read_bytes())
        fresh = [r for r in loaded if r.model not in seen]  # a model run twice: the first run's rows
        rows += fresh
        seen |= {r.model for r in fresh}
    inners = () if args.inner == "none" else tuple(args.inner.split(","))
    settings = Settings(torch.device("cpu"), inners, quick=True, min_run_time=0.05, rounds=3, step_cap_s=math.inf,
                        budget_s=1.0)  # fmt: skip
    flag_inner = None if args.flag_inner == "none" else args.flag_inner
    text, fallbacks = render_models(rows, settings, flag_inner, step_shapes(args.steps), False, math.nan, True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "models.md").write_text(text.replace("_Models section: nan s._", f"_Merged from {len(args.runs)} runs._"))
    (out / "fallbacks.md").write_text(fallbacks)
    write_csv(rows, out / "models.csv")
    print(f"{len(seen)} models -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
