"""Rerun the programs a fuzz run saw fall back, on the engine as it is now, and count what became of them.

Usage (from the repository root)::

    python scripts/recheck_fallbacks.py FUZZ_DIR [--seed S] [--labels prototype[aot_eager],prototype_fn[aot_eager]]
        [--output results/recheck-SEED.md]

FUZZ_DIR is the ``--out`` folder of a ``compare --fuzz N --seed S`` run (its ``rows_*.jsonl`` files: each
program's kind and whether it fell back, per strategy). Each program whose eager forward ran and that fell back
under one of the labels is generated again (``generate(seed, index, all dimensions)``, the fuzzer's own programs)
and run, in this process, under eager and that strategy, classified as the fuzzer classifies it. The table counts
each transition (the run's kind and fallback, then now's), with examples: a change to the engine that lifts a
fallback shows as ``match, fell back -> match``, and one that makes a program diverge that matched before as
``match -> divergence`` (the number that must stay 0). A quick check of a change between two full fuzz runs: it
reruns only the fallbacks, not the programs that compiled.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_LABELS = ("prototype[aot_eager]", "prototype_fn[aot_eager]")


def read_rows(fuzz_dir: Path) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for path in glob.glob(str(fuzz_dir / "**" / "rows_*.jsonl"), recursive=True):
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            rows[row["index"]] = row
    return rows


def fell_back(result: dict[str, Any]) -> bool:
    return result["category"] == "fallback" or bool(result.get("fallbacks"))


def seed_of(fuzz_dir: Path) -> int:
    found = {int(m) for p in glob.glob(str(fuzz_dir / "**" / "rows_*.jsonl"), recursive=True)
             for m in re.findall(r"rows_(\d+)", p)}  # fmt: skip
    if len(found) != 1:
        raise SystemExit(f"{fuzz_dir}: pass --seed (the rows name seeds {sorted(found) or 'none'})")
    return found.pop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fuzz_dir", type=Path)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--labels", default=",".join(DEFAULT_LABELS))
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    from predispatch_views.compare import fuzz
    from predispatch_views.compare.fuzz_program import generate, parse_dimensions
    from predispatch_views.compare.strategies import eager

    seed = args.seed if args.seed is not None else seed_of(args.fuzz_dir)
    labels = args.labels.split(",")
    dimensions = parse_dimensions("all")
    strategies = {s.label: s for s in fuzz.strategy_set(["aot_eager"], dimensions)}
    rows = read_rows(args.fuzz_dir)
    chosen = sorted(
        i
        for i, row in rows.items()
        if row.get("eager_forward_runs") and any(fell_back(row["strategies"][lab]) for lab in labels)
    )
    counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
    examples: dict[tuple[str, str, str], list[int]] = collections.defaultdict(list)
    for n, index in enumerate(chosen):
        program = generate(seed, index, dimensions)
        reference = fuzz.run_program(program, eager())
        for label in labels:
            before = rows[index]["strategies"][label]
            run = fuzz.run_program(program, strategies[label])
            outcome = fuzz.classify(reference, run)
            old = f"{before['kind']}{', fell back' if fell_back(before) else ''}"
            new = f"{outcome.kind}{', fell back' if run.fallbacks else ''}"
            counts[(label, old, new)] += 1
            examples[(label, old, new)].append(index)
        print(f"  [{n + 1}/{len(chosen)}] program {index}", file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    lines = [
        f"# Fallbacks of seed {seed} rerun",
        "",
        f"_`python scripts/recheck_fallbacks.py {args.fuzz_dir}`: the {len(chosen)} programs of the run whose eager "
        f"forward ran and that fell back under {', '.join(labels)}, rerun on commit "
        f"{commit.stdout.strip() or 'unknown'}._",
        "",
        "| entry point | in the run | now | programs | examples |",
        "|---|---|---|---:|---|",
    ]
    for (label, old, new), count in sorted(counts.items()):
        shown = ", ".join(map(str, examples[(label, old, new)][:8]))
        lines.append(f"| {label} | {old} | {new} | {count} | {shown} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output is not None:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
