"""Large fuzzing runs: several seeds, worker processes, and survival of programs that kill the process.

``python -m predispatch_views compare --fuzz N --seed S1,S2,... --jobs J`` runs ``N`` programs per seed in ``J``
worker processes (chunks of programs, each a fresh ``python -m predispatch_views.compare.fuzz_runner``), and
writes one combined table. Some generated programs make torch itself crash the process (a segfault in stock
AOTAutograd was seen); a worker that dies is restarted after the program it was running, and that program is
run again once per strategy, each in its own process, so the crash is attributed to the strategies that
really crash (a strategy whose process dies is a ``crash``; the rules of fuzz.py then apply as usual).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .ceiling import Gap, Result, ceiling_label_for, gap_markdown, gaps, is_below_the_ceiling
from .fuzz import (
    AS_STOCK_ONE_GRAPH,
    COLUMNS,
    CRASH_AS_THE_CEILING,
    CRASH_WHERE_STOCK_RUNS,
    INVARIANT_RULES,
    WRONG_AS_THE_CEILING,
    WRONG_ON_A_PROBE,
    WRONG_WHERE_STOCK_MATCHES,
    Failure,
    Outcome,
    dimensions_paragraph,
    failure_markdown,
    features_table,
    fuzz,
    gap_result,
    is_prototype_label,
    program_features,
    strategy_set,
    table_lines,
    violated_rule,
)
from .fuzz_program import dimensions_text, generate, parse_dimensions
from .report import stock_version_line
from .strategies import Strategy

CHUNK = 25


def strategies_for(inners: Sequence[str], dimensions: frozenset[str] = frozenset()) -> list[Strategy]:
    return strategy_set(inners, dimensions)


# ---------------------------------------------------------------------------------------------------------
# The worker: one chunk of programs, one JSON row per program as soon as it is done.
# ---------------------------------------------------------------------------------------------------------


def _row(program_name: str, seed: int, index: int, results: Any) -> dict[str, Any]:
    program, row = results.programs[0]
    labels = results.labels
    out: dict[str, Any] = {"seed": seed, "index": index, "name": program_name, "strategies": {}}
    out["features"] = program_features(program) if results.dimensions else []
    out["eager_forward_runs"] = row[labels[0]].forward_runs
    for label in labels[1:]:
        r = row.get(label)
        if r is None:  # a strategy setting this program does not run under
            continue
        stock = "stock" + label[label.index("[") :]
        # The rule fuzz() found (it compares probe by probe and with the ceiling), else the invariant's.
        rule = next((f.rule for f in results.failures if f.label == label), None)
        if rule is None and label.startswith("prototype") and stock in row:
            rule = violated_rule(r.outcome, row[stock].outcome)
        ceiling = ceiling_label_for(label, row) if is_prototype_label(label) else None
        out["strategies"][label] = {
            "category": r.category,
            "kind": r.outcome.kind,
            "probe": r.outcome.probe,
            "fallbacks": list(dict.fromkeys(r.fallbacks)),
            "rule": rule,
            "below_ceiling": ceiling is not None and is_below_the_ceiling(gap_result(r), gap_result(row.get(ceiling))),
        }
    return out


def run_worker(args: argparse.Namespace) -> int:
    dimensions = parse_dimensions(args.dimensions)
    strategies = strategies_for(args.inner.split(","), dimensions)
    if args.only:
        strategies = [s for s in strategies if s.inner is None or s.label == args.only]
    rows, failures = Path(args.rows), Path(args.failures)

    def report(failure: Failure) -> None:
        with failures.open("a") as fh:
            fh.write("\n".join(failure_markdown(failure)) + "\n")

    for index in range(args.start, args.start + args.count):
        results = fuzz(
            1, args.seed, strategies, start=index, do_shrink=not args.only, on_failure=report, dimensions=dimensions
        )
        name = results.programs[0][0].name
        with rows.open("a") as fh:
            fh.write(json.dumps(_row(name, args.seed, index, results)) + "\n")
    return 0


# ---------------------------------------------------------------------------------------------------------
# The parent: chunks in worker processes, restart after a crash, attribute the crash.
# ---------------------------------------------------------------------------------------------------------


def _worker_command(
    inner: str, dimensions: str, seed: int, start: int, count: int, rows: Path, failures: Path, only: str = ""
) -> list[str]:
    command = [sys.executable, "-m", "predispatch_views.compare.fuzz_runner", "--inner", inner]
    command += ["--dimensions", dimensions]
    command += ["--seed", str(seed), "--start", str(start), "--count", str(count)]
    command += ["--rows", str(rows), "--failures", str(failures)]
    return command + (["--only", only] if only else [])


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _attribute_crash(
    inner: str, dimensions: str, labels: list[str], seed: int, index: int, work: Path
) -> dict[str, Any]:
    """Run one program once per strategy, each in its own process: the strategies whose process dies crash."""
    program = generate(seed, index, parse_dimensions(dimensions))
    per_label: dict[str, Any] = {}
    eager_forward_runs: bool | None = None  # from eager's run beside each strategy; None if every process died
    for label in labels[1:]:
        setting = label[label.index("[") + 1 : -1].partition(",")[2]
        if setting and setting not in program.settings:
            continue
        rows = work / f"attr_{seed}_{index}_{label.replace('[', '_').replace(',', '_').rstrip(']')}.jsonl"
        done = subprocess.run(
            _worker_command(inner, dimensions, seed, index, 1, rows, work / "attr_failures.md", only=label),
            capture_output=True,
            timeout=600,
        )
        got = _read_rows(rows)
        if done.returncode == 0 and got:
            per_label[label] = got[0]["strategies"][label]
            eager_forward_runs = got[0].get("eager_forward_runs", eager_forward_runs)
        else:
            per_label[label] = {
                "category": "crash",
                "kind": "crash",
                "probe": f"process died (exit status {done.returncode})",
                "fallbacks": [],
                "rule": None,
            }
    for label, r in per_label.items():
        stock = "stock" + label[label.index("[") :]
        if label.startswith("prototype") and stock in per_label:
            r["rule"] = violated_rule(
                Outcome(r["kind"], r["probe"]), Outcome(per_label[stock]["kind"], per_label[stock]["probe"])
            )
        ceiling = ceiling_label_for(label, per_label) if is_prototype_label(label) else None
        r["below_ceiling"] = ceiling is not None and is_below_the_ceiling(_result(r), _result(per_label.get(ceiling)))
    features = program_features(program) if dimensions != "classic" else []
    return {
        "seed": seed,
        "index": index,
        "name": program.name,
        "features": features,
        "strategies": per_label,
        "died": True,
        "eager_forward_runs": eager_forward_runs,
    }


def _run_chunk(
    inner: str, dimensions: str, labels: list[str], seed: int, start: int, count: int, work: Path
) -> list[dict[str, Any]]:
    rows = work / f"rows_{seed}_{start}.jsonl"
    failures = work / f"failures_{seed}_{start}.md"
    died = work / f"died_{seed}_{start}.jsonl"  # kept apart: a resumed run must not run them again
    end = start + count
    crashed = _read_rows(died)
    done = {r["index"] for r in _read_rows(rows)} | {r["index"] for r in crashed}
    position = next((i for i in range(start, end) if i not in done), end)  # after the programs a resumed run has
    while position < end:
        subprocess.run(
            _worker_command(inner, dimensions, seed, position, end - position, rows, failures),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=6 * 3600,
        )
        done = {r["index"] for r in _read_rows(rows)} | {r["index"] for r in crashed}
        position = next((i for i in range(start, end) if i not in done), end)
        if position < end:  # the worker died on this program
            crashed.append(_attribute_crash(inner, dimensions, labels, seed, position, work))
            with died.open("a") as fh:
                fh.write(json.dumps(crashed[-1]) + "\n")
            print(f"  {crashed[-1]['name']}: the process died; attributed per strategy", flush=True)
            position += 1
    return sorted(_read_rows(rows) + crashed, key=lambda r: r["index"])


def run_many(
    n: int,
    seeds: Sequence[int],
    inners: Sequence[str],
    jobs: int,
    out_dir: Path,
    dimensions: frozenset[str] = frozenset(),
    resume: bool = False,
) -> str:
    """``resume``: keep the programs a run with the same arguments left in ``out_dir/fuzz_work`` (killed before its
    end) and run only the others; the wall time is then this part's."""
    inner = ",".join(inners)
    dims = dimensions_text(dimensions)
    labels = [s.label for s in strategies_for(inners, dimensions)]
    work = out_dir / "fuzz_work"
    work.mkdir(parents=True, exist_ok=True)
    for stale in work.iterdir():
        if not resume or stale.name.startswith("attr_"):
            stale.unlink()
    chunks = [(seed, start, min(CHUNK, n - start)) for seed in seeds for start in range(0, n, CHUNK)]
    began = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [
            pool.submit(_run_chunk, inner, dims, labels, seed, start, count, work) for seed, start, count in chunks
        ]
        for k, future in enumerate(futures):
            rows += future.result()
            print(f"fuzz: chunk {k + 1}/{len(chunks)} done ({len(rows)} programs)", flush=True)
    seconds = time.perf_counter() - began
    failures = "".join(p.read_text() for p in sorted(work.glob("failures_*.md")))
    text = markdown(rows, labels, seeds, seconds, failures, dimensions)
    (out_dir / "fuzz.md").write_text(text)
    write_csv(rows, out_dir / "fuzz.csv")
    return text


def summary(rows: list[dict[str, Any]], labels: list[str]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for label in labels[1:]:
        counts = dict.fromkeys(COLUMNS, 0)
        for row in rows:
            r = row["strategies"].get(label)
            if r is None:
                continue
            counts["programs"] += 1
            counts[r["category"]] += 1
            counts["fallback_match"] += bool(r["fallbacks"]) and r["kind"] == "match"
            counts["wrong_where_stock_matches"] += r["rule"] == WRONG_WHERE_STOCK_MATCHES
            counts["crash_where_stock_runs"] += r["rule"] == CRASH_WHERE_STOCK_RUNS
            counts["wrong_on_a_probe"] += r["rule"] == WRONG_ON_A_PROBE
            counts["crash_as_the_ceiling"] += r["rule"] == CRASH_AS_THE_CEILING
            counts["wrong_as_the_ceiling"] += r["rule"] == WRONG_AS_THE_CEILING
            counts["as_stock_one_graph"] += r["rule"] == AS_STOCK_ONE_GRAPH
            counts["below_the_ceiling"] += bool(r.get("below_ceiling"))
        table[label] = counts
    return table


def _result(r: dict[str, Any] | None) -> Result | None:
    return None if r is None else Result(r["kind"], r["probe"], tuple(r["fallbacks"]))


def row_gaps(rows: list[dict[str, Any]], labels: list[str]) -> list[Gap]:
    """The gap to the ceiling per entry point, over the programs whose eager forward runs (ceiling.py). A row
    without the field (a run from before the ceiling, or one whose every attribution process died) is left out."""
    records = [
        {label: result for label, r in row["strategies"].items() if (result := _result(r)) is not None}
        for row in rows
        if row.get("eager_forward_runs")
    ]
    return gaps(records, labels)


def markdown(
    rows: list[dict[str, Any]],
    labels: list[str],
    seeds: Sequence[int],
    seconds: float,
    failures: str,
    dimensions: frozenset[str] = frozenset(),
) -> str:
    died = [r["name"] for r in rows if r.get("died")]
    lines = [
        f"## Differential fuzzing: {len(rows)} programs, seeds {', '.join(map(str, seeds))}",
        "",
        stock_version_line(),
        "",
        f"Every probe of the parity suite plus `after_call` and `sharing`; {seconds:.0f} s of wall time in worker "
        "processes. `fallback` programs are not counted in match/divergence/crash; `fallback_match` is how many of "
        "them still matched eager. `wrong_where_stock_matches`: the strategy diverges or crashes on a program where "
        "stock matches eager; `crash_where_stock_runs`: it crashes where stock does not (these two are issue 9's "
        "invariant). `crash_as_the_ceiling`, apart from it: a crash where stock runs that the ceiling raises too, "
        "at the same probe with the same error (Dynamo's own); `wrong_as_the_ceiling`, the same for a divergence "
        "where stock matches. `as_stock_one_graph`, apart from it too: a "
        "compile_function program breaking the invariant where stock's own counterpart, `aot_function` on the whole "
        "function, fails the same way. `wrong_on_a_probe` (diagnostics): on the other "
        "programs, some probe where the strategy differs from eager while stock does not. `below_the_ceiling` "
        "(diagnostics): the strategy differs from eager where the ceiling (`dynamo_eager`, Dynamo with "
        '`backend="eager"`) under the same setting matches.',
        "",
        dimensions_paragraph(dimensions),
        "",
        "| strategy | " + " | ".join(COLUMNS) + " |",
        "|---|" + "---:|" * len(COLUMNS),
    ]
    lines += table_lines(summary(rows, labels), (r["fallbacks"] for row in rows for r in row["strategies"].values()))
    if gap := gap_markdown(row_gaps(rows, labels), "programs"):
        lines += ["", *gap]
    if dimensions:
        records = [
            (
                row.get("features", []),
                {
                    label: (r["kind"], r["rule"] if r["rule"] in INVARIANT_RULES else None)
                    for label, r in row["strategies"].items()
                },
            )
            for row in rows
        ]
        lines += ["", *features_table(records, labels[1:])]
    if died:
        lines += [
            "",
            f"Programs that killed a worker process (torch crashed), run again per strategy: {', '.join(died)}",
        ]
    lines += ["", "### Prototype failures (shrunk)", "", failures.strip() or "none"]
    return "\n".join(lines) + "\n"


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    import csv

    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "seed",
                "program",
                "strategy",
                "category",
                "outcome",
                "probe",
                "rule",
                "fallback",
                "eager_forward_runs",
                "below_the_ceiling",
            ]
        )
        for row in rows:
            eager_runs = row.get("eager_forward_runs")
            for label, r in row["strategies"].items():
                writer.writerow(
                    [
                        row["seed"],
                        row["name"],
                        label,
                        r["category"],
                        r["kind"],
                        r["probe"] or "",
                        r["rule"] or "",
                        "; ".join(r["fallbacks"]),
                        "" if eager_runs is None else int(eager_runs),
                        int(bool(r.get("below_ceiling"))),
                    ]
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m predispatch_views.compare.fuzz_runner")
    parser.add_argument("--inner", default="aot_eager")
    parser.add_argument("--dimensions", default="classic", help="all, classic, or some (fuzz_program.DIMENSIONS)")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--start", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--rows", required=True)
    parser.add_argument("--failures", required=True)
    parser.add_argument("--only", default="", help="run eager and this one strategy only (crash attribution)")
    return run_worker(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
