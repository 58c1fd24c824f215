"""Per-strategy summary of the model suite's table in results/models-details.md (issue 25).

Usage (from the repository root)::

    python scripts/models_summary.py --output results/models-summary.md

The design pack quotes counts over the model suite (models that ran every training step, that matched eager at
every step, views kept); this script derives them from the generated ``Every strategy`` table that
``scripts/regenerate_results.py --models`` writes, so that a quoted count is a cell of a generated file
(predispatch_views/doc_figures.py) rather than a hand count. Per strategy:

- ``models``: rows of that strategy;
- ``every step ran``: ``steps run`` is n/n;
- ``parity at every step``: ``parity over steps`` is ``ok n/n`` (outputs, grads and aliasing as eager's at each step);
- ``first shape as eager``: outputs and grads allclose to eager's at the first shape;
- ``views kept / eager's``: returned tensors that are views in eager and stay views, summed over the models;
- ``fallbacks over steps``: summed; ``largest parameter diff``: the largest ``max param diff`` after the steps;
- ``graphs replayed (sliced)``: at the first shape, graphs whose views the prototype replayed, and how many of them
  were sliced on Dynamo's own graph with no pre-dispatch trace (Note [Slicing Dynamo's graph]).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "results" / "models-details.md"


def rows(text: str) -> list[dict[str, str]]:
    """The rows of the ``Every strategy`` table, as column -> cell."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("### Every strategy"))
    header_at = next(i for i in range(start, len(lines)) if lines[i].startswith("| model | strategy |"))
    columns = [c.strip() for c in lines[header_at].strip().strip("|").split("|")]
    found = []
    for line in lines[header_at + 2 :]:
        if not line.startswith("|"):
            break
        found.append(dict(zip(columns, (c.strip() for c in line.strip().strip("|").split("|")))))
    return found


def _fraction_done(cell: str) -> bool:
    m = re.search(r"(\d+)/(\d+)", cell)
    return m is not None and m.group(1) == m.group(2)


def _kept(cell: str) -> tuple[int, int]:
    m = re.match(r"(\d+) \((\d+)\)", cell)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _replayed(cell: str) -> tuple[int, int]:
    replayed = re.search(r"replayed (\d+)", cell)
    sliced = re.search(r"sliced (\d+)", cell)
    return (int(replayed.group(1)) if replayed else 0, int(sliced.group(1)) if sliced else 0)


def summary(found: list[dict[str, str]]) -> list[str]:
    strategies = list(dict.fromkeys(r["strategy"] for r in found))
    lines = [
        "| strategy | models | every step ran | parity at every step | first shape as eager | views kept / eager's "
        "| fallbacks over steps | largest parameter diff | graphs replayed (sliced) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for strategy in strategies:
        mine = [r for r in found if r["strategy"] == strategy]
        ran = sum(_fraction_done(r.get("steps run", "")) for r in mine)
        parity = sum(
            r.get("parity over steps", "").startswith("ok") and _fraction_done(r["parity over steps"]) for r in mine
        )
        parity_cell = str(parity) if strategy != "eager" else "-"
        first = sum(r.get("outputs") == "yes" and r.get("grads") == "yes" for r in mine)
        kept = [_kept(r.get("views kept (of eager's)", "")) for r in mine]
        fallbacks = [int(r["fallbacks over steps"]) for r in mine if r.get("fallbacks over steps", "").isdigit()]
        diffs = []
        for r in mine:
            cell = r.get("10 steps: loss rel. diff / max param diff", "")
            if "/" in cell:
                with contextlib.suppress(ValueError):
                    diffs.append(float(cell.split("/")[1]))
        replays = [_replayed(r.get("graph outcomes", "")) for r in mine]
        replay_cell = (
            f"{sum(k for k, _ in replays)} ({sum(k for _, k in replays)})" if any(k for k, _ in replays) else "-"
        )
        lines.append(
            f"| {strategy} | {len(mine)} | {ran} | {parity_cell} | {first} | {sum(k for k, _ in kept)} / "
            f"{sum(e for _, e in kept)} | {sum(fallbacks) if fallbacks else '-'} | "
            f"{f'{max(diffs):.1e}' if diffs else '-'} | {replay_cell} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    text = args.source.read_text()
    header = next((line for line in text.splitlines() if line.startswith("_Generated by")), "")
    command = re.search(r"`(python scripts/regenerate_results\.py[^`]*)`", header)
    engine = re.search(r"commit (\w+)", text)
    source = args.source.resolve().relative_to(ROOT) if args.source.resolve().is_relative_to(ROOT) else args.source
    run = command.group(1) if command else "regenerate_results.py" if args.source == SOURCE else "compare --models"
    written = f"--source {source} " if args.source != SOURCE else ""
    body = [
        "# Model suite: summary per strategy",
        "",
        f"_Written by `python scripts/models_summary.py {written}--output {args.output or 'FILE'}` from "
        f"{source} ({run}{', engine ' + engine.group(1) if engine else ''}); generated, do not edit._",
        "",
        "## Summary",
        "",
        *summary(rows(text)),
        "",
    ]
    out = "\n".join(body)
    if args.output is not None:
        args.output.write_text(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
