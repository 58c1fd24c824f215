"""Command line: ``python -m predispatch_views compare [--quick]``, ``... explain MODULE:FUNCTION`` and
``... run SCRIPT [ARGS]`` (the experimental flag on)."""

from __future__ import annotations

import argparse
import sys


class _HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """``(default: ...)`` after every option that has a default worth showing (not None, not a False flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action) or ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m predispatch_views")
    sub = parser.add_subparsers(dest="command", required=True)
    from .compare.main import add_compare_arguments
    from .explain_cli import add_explain_arguments
    from .launcher import add_run_arguments

    defaults = _HelpWithDefaults
    add_compare_arguments(
        sub.add_parser("compare", help="parity and performance tables vs eager and stock", formatter_class=defaults)
    )
    add_explain_arguments(
        sub.add_parser("explain", help="every stage's graph for one program", formatter_class=defaults)
    )
    add_run_arguments(sub.add_parser("run", help="run a script with the experimental flag on"))
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
