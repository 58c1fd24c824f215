"""Regenerate design/results.md from ``python -m predispatch_views compare``. Never edit results.md by hand.

Usage (from the repository root)::

    python scripts/regenerate_results.py            # the full comparison -> design/results.md (committed)
    python scripts/regenerate_results.py --quick    # the quick subset -> results/results-quick.md (not committed)

Only the full comparison (no arguments) writes design/results.md by default: a quick or partial run (``--quick``,
``--cases``, ``--inner``...) goes to results/, so it cannot silently replace the committed full results.
``--output`` chooses the file explicitly.

The full comparison adds ``--models`` (the real-models table) when transformers is installed
(``pip install -e ".[models]"``).

The compare command runs in a subprocess with ``--out`` pointing into a temporary folder; its ``compare.md`` is
copied into design/results.md under a header that records the command, the torch version, the machine and the
commit it was generated from. The only change to the copied text: links to files compare wrote next to
compare.md (the scaling plot) would dangle once the folder is deleted, so they are replaced by a note. Arguments
other than ``--quick`` and ``--output`` are passed through to compare unchanged (e.g. ``--inner aot_eager`` or
``--cases unbind``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "design" / "results.md"
QUICK_OUTPUT = ROOT / "results" / "results-quick.md"
PARTIAL_OUTPUT = ROOT / "results" / "results-partial.md"
# Sections moved out of design/results.md into results/ (issue 25: no generated log over 50 KB in design/): the
# per-case parity table and fallback list, and the models' every-strategy table; results.md keeps the summary
# tables and a link where each was.
DETAIL_SECTIONS = {
    "### Prototype fallbacks": ROOT / "results" / "parity-details.md",
    "### Per case": ROOT / "results" / "parity-details.md",
    "### Every strategy": ROOT / "results" / "models-details.md",
}
_LOCAL_LINK = re.compile(r"!?\[([^\]]*)\]\((?!https?://|#)([^)\s]+)\)")


def drop_local_links(markdown: str) -> str:
    """Replace links to files in compare's temporary output folder with a note (they would dangle)."""

    def note(match: re.Match[str]) -> str:
        return f"_({match.group(1) or 'file'}: `{match.group(2)}` is written by compare into its --out folder)_"

    return _LOCAL_LINK.sub(note, markdown)


def split_details(results: str) -> tuple[str, dict[Path, str]]:
    """(results without the detail sections, the detail sections by the file they move to); each moved section
    leaves a link behind. A section moved already (only its link left) moves nothing."""
    kept: list[str] = []
    moved: dict[Path, list[str]] = {}
    target = kept
    for line in results.splitlines(keepends=True):
        if line.startswith("#"):
            to = DETAIL_SECTIONS.get(line.strip())
            target = moved.setdefault(to, []) if to is not None else kept
            if to is not None:
                title = line.strip().lstrip("#").strip().lower()
                kept.append(f"{line}\n_Moved to [results/{to.name}](../results/{to.name}) (generated with this file): "
                            f"{title}._\n\n")  # fmt: skip
        target.append(line)
    texts = {to: "".join(lines) for to, lines in moved.items()}
    return "".join(kept), {to: text for to, text in texts.items() if "_Moved to [results/" not in text}


def write_results(output: Path, text: str) -> None:
    """``text`` to ``output``; for design/results.md, its detail sections to their files in results/."""
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.resolve() != DEFAULT_OUTPUT.resolve():
        output.write_text(text)
        return
    kept, moved = split_details(text)
    output.write_text(kept)
    generated = text.split("\n\n", 3)[2]
    for to, sections in moved.items():
        to.parent.mkdir(parents=True, exist_ok=True)
        to.write_text(f"# {to.stem.replace('-', ' ').capitalize()} (generated with design/results.md; do not edit)\n\n"
                      f"{generated}\n\n{sections}")  # fmt: skip
        print(f"wrote {to}")


def _git_commit() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + (" (with uncommitted changes)" if dirty else "")


def _torch_version() -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, cwd=ROOT
    )
    return out.stdout.strip() or "unknown"


def header(compare_args: list[str], elapsed_s: float) -> str:
    command = shlex.join(["python", "-m", "predispatch_views", "compare", *compare_args])
    regenerate = shlex.join(["python", "scripts/regenerate_results.py", *compare_args])
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "# Results\n\n"
        "<!-- Generated file: do not edit. Regenerate with scripts/regenerate_results.py. -->\n\n"
        f"_Generated by `{regenerate}`, which ran `{command}` (with `--out` in a temporary folder) and copied "
        f"its `compare.md` below, unchanged except for links to files in that folder. {now}; "
        f"commit {_git_commit()}; torch {_torch_version()}; "
        f"Python {platform.python_version()}; {platform.machine()} {platform.system()}, "
        f"{os.cpu_count()} CPUs; compare took {elapsed_s:.0f} s._\n\n"
    )


def default_output(quick: bool, compare_args: list[str]) -> Path:
    """design/results.md only for the full comparison; any subset goes to results/ (not committed)."""
    return QUICK_OUTPUT if quick else PARTIAL_OUTPUT if compare_args else DEFAULT_OUTPUT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="pass --quick to compare")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"where to write (default: {DEFAULT_OUTPUT.relative_to(ROOT)} for the full run, "
        f"{QUICK_OUTPUT.relative_to(ROOT)} with --quick, {PARTIAL_OUTPUT.relative_to(ROOT)} with other arguments)",
    )
    parser.add_argument(
        "--split-existing", action="store_true", help="only move the detail sections out of an existing results.md"
    )
    args, passthrough = parser.parse_known_args(argv)
    if args.split_existing:
        write_results(DEFAULT_OUTPUT, DEFAULT_OUTPUT.read_text())
        return 0
    if args.output is None:
        args.output = default_output(args.quick, passthrough)
    if any(a == "--out" or a.startswith("--out=") for a in passthrough):
        parser.error("--out is chosen by this script (a temporary folder)")
    compare_args = (["--quick"] if args.quick else []) + passthrough
    if not args.quick and "--models" not in compare_args and importlib.util.find_spec("transformers") is not None:
        compare_args.append("--models")

    with tempfile.TemporaryDirectory(prefix="predispatch_views_results_") as tmp:
        command = [sys.executable, "-m", "predispatch_views", "compare", *compare_args, "--out", tmp]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        print("running:", shlex.join(command), flush=True)
        start = datetime.datetime.now()
        completed = subprocess.run(command, cwd=ROOT, env=env)
        elapsed = (datetime.datetime.now() - start).total_seconds()
        compare_md = Path(tmp) / "compare.md"
        if completed.returncode != 0 or not compare_md.exists():
            print(
                f"compare failed (exit status {completed.returncode}); {args.output} left unchanged",
                file=sys.stderr,
            )
            return completed.returncode or 1
        body = compare_md.read_text()

    write_results(args.output, header(compare_args, elapsed) + drop_local_links(body.lstrip()))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
