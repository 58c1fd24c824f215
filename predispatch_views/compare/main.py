"""``python -m predispatch_views compare``: the parity table, then the performance table.

Each half lives in its own module and returns its Markdown section; this file only orchestrates.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from .validate import ArgumentError, check_compare_arguments


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a subset that finishes in under 3 minutes on 2 CPUs")
    parser.add_argument(
        "--inner", default=None, help="inner backends, comma separated (default aot_eager,inductor; --fuzz: aot_eager)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--show-divergences", action="store_true", help="list every divergence side by side")
    parser.add_argument(
        "--divergence-strategy",
        default=None,
        help="list only divergences of strategies whose label contains this text (implies --show-divergences)",
    )
    parser.add_argument(
        "--divergence-case",
        default=None,
        help="list only divergences of cases whose name contains this text (implies --show-divergences)",
    )
    parser.add_argument("--out", default="results", help="folder for the Markdown, CSV and PNG outputs")
    parser.add_argument("--skip-parity", action="store_true", help="no parity section")
    parser.add_argument("--skip-perf", action="store_true", help="no performance section")
    parser.add_argument("--slow", action="store_true", help="also run the stress workloads")
    parser.add_argument(
        "--compile-rounds", type=int, default=None, help="rounds of the compile-time measure (default 5; --quick 3)"
    )
    parser.add_argument(
        "--perf-inner", default=None, help="inner backends of the performance section (default: --inner's)"
    )
    parser.add_argument("--cases", default=None, help="only cases whose name contains this text")
    parser.add_argument("--models", action="store_true", help="also tiny Hugging Face models (extra [models])")
    parser.add_argument(
        "--models-inner", default="aot_eager", help="inner backends of --models' backend rows, comma separated, or none"
    )
    parser.add_argument(
        "--models-flag-inner",
        default="inductor",
        help="--models: the inner backend of the flag rows (plain torch.compile with and without the flag): "
        "inductor, aot_eager, or none",
    )
    parser.add_argument(
        "--models-only", default=None, metavar="NAME[,NAME]", help="--models: only these models (implies --models)"
    )
    parser.add_argument("--models-steps", type=int, default=10, help="--models: training steps through changing shapes")
    parser.add_argument(
        "--models-alternatives",
        action="store_true",
        help="--models: also stock without the unsafe fix and slice regeneration per inner",
    )
    parser.add_argument("--fuzz", type=int, default=0, metavar="N", help="only run N random programs (fuzz.py)")
    parser.add_argument("--seed", default="0", help="the fuzzer's seed, or several, comma separated")
    parser.add_argument(
        "--fuzz-dimensions",
        default="all",
        help="--fuzz: all (default), classic (the generator and strategies of before: documented seeds reproduce), "
        "or some of out,inputs,sizes,grad_mode,dynamic,compiled_autograd, comma separated",
    )
    parser.add_argument(
        "--fuzz-resume",
        action="store_true",
        help="--fuzz --jobs: keep the programs a killed run with the same arguments left in OUT/fuzz_work",
    )
    parser.add_argument("--opinfo", action="store_true", help="only run the OpInfo oracle (opinfo.py)")
    parser.add_argument("--opinfo-ops", default=None, help="--opinfo: ops whose name contains one of these (a,b,...)")
    parser.add_argument("--opinfo-samples", type=int, default=1, metavar="N", help="--opinfo: sample inputs per op")
    parser.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="--fuzz or --opinfo in this many worker processes that survive a crash (default: in this process)",
    )
    parser.add_argument(
        "--pytorch-tests",
        default=None,
        metavar="PATH",
        help="only run PyTorch's test files under PATH (a source tree or one file) plainly, under stock and under "
        "the prototype, dynamo-wrapped (pytorch_tests.py); --jobs processes at once",
    )
    parser.add_argument("--pytorch-tests-filter", default=None, metavar="EXPR", help="pytest -k expression")
    parser.add_argument(
        "--pytorch-tests-strategies", default="plain,stock,prototype", help="--pytorch-tests: strategies to run"
    )
    parser.add_argument("--pytorch-tests-shard", type=int, default=50, help="--pytorch-tests: tests per process")
    parser.add_argument(
        "--pytorch-tests-timeout", type=float, default=600.0, help="--pytorch-tests: seconds one test may take"
    )
    parser.add_argument(
        "--pytorch-tests-mode",
        default="auto",
        choices=("auto", "dynamo-wrapped", "swapped"),
        help="--pytorch-tests: dynamo-wrapped (each test body under torch.compile), swapped (the file's own "
        "compile calls routed through the prototype), or auto: swapped for test_aotdispatch.py and "
        "test_functionalization.py (default: auto)",
    )
    parser.set_defaults(run=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    inner = args.inner or ("aot_eager" if args.fuzz or args.opinfo else "aot_eager,inductor")
    args.inners = tuple(i.strip() for i in inner.split(",") if i.strip())
    if args.divergence_strategy is not None or args.divergence_case is not None:
        args.show_divergences = True
    if getattr(args, "models_only", None):
        args.models = True
    try:
        out_dir = check_compare_arguments(args)
    except ArgumentError as e:
        print(f"compare: error: {e}", file=sys.stderr)
        return 2
    if args.pytorch_tests:
        from .pytorch_tests import run_pytorch_tests_section

        return run_pytorch_tests_section(args, out_dir)
    if args.opinfo:
        from .opinfo import run_opinfo_section

        run_opinfo_section(args, out_dir)
        return 0
    if args.fuzz:
        from .fuzz_program import parse_dimensions

        try:
            args.fuzz_dimensions = parse_dimensions(args.fuzz_dimensions)
        except ValueError as e:
            print(f"compare: error: --fuzz-dimensions: {e}", file=sys.stderr)
            return 2
        seeds = [int(s) for s in str(args.seed).split(",") if s.strip()]
        if args.jobs or len(seeds) > 1:
            from .fuzz_runner import run_many

            jobs = max(args.jobs, 1)
            print(run_many(args.fuzz, seeds, args.inners, jobs, out_dir, args.fuzz_dimensions, args.fuzz_resume))
            return 0
        from .fuzz import run_fuzz_section

        args.seed = seeds[0]
        run_fuzz_section(args, out_dir)
        return 0
    sections: list[str] = []
    start = time.perf_counter()
    failure: str | None = None
    for name, section in _sections(args):
        try:
            sections.append(section(args, out_dir))
        except Exception as e:  # keep what was measured: the sections before this one are written as they are
            traceback.print_exc()
            failure = f"the {name} section failed ({type(e).__name__}: {e}); the sections after it did not run"
            break
    elapsed = time.perf_counter() - start
    if failure is None and getattr(args, "incomplete", None):
        failure = "; ".join(args.incomplete)
    from .timing import provenance

    command = " ".join(["python -m predispatch_views compare", *sys.argv[2:]]) if sys.argv[1:2] == ["compare"] else ""
    footer = provenance(command or "python -m predispatch_views compare") + f" {elapsed:.0f} s."
    if failure is not None:
        footer = f"**Incomplete: {failure}.**\n\n{footer}"
    (out_dir / "compare.md").write_text("\n\n".join([*sections, footer]) + "\n")
    print(f"\nwrote {out_dir / 'compare.md'} ({elapsed:.0f} s){' INCOMPLETE: ' + failure if failure else ''}")
    return 1 if failure is not None else 0


def _sections(args: argparse.Namespace) -> list[tuple[str, Callable[[argparse.Namespace, Path], str]]]:
    sections: list[tuple[str, Callable[[argparse.Namespace, Path], str]]] = []
    if not args.skip_parity:
        from .parity import run_parity_section

        sections.append(("parity", run_parity_section))
    if not args.skip_perf:
        from .benchmarks import run_perf_section

        sections.append(("performance", run_perf_section))
    if args.models:
        from .models import run_models_section

        sections.append(("models", run_models_section))
    if args.slow:
        from .stress import run_stress_section

        sections.append(("stress", run_stress_section))
    return sections
