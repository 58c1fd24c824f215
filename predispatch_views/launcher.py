"""``python -m predispatch_views run SCRIPT [ARGS...]``: run a script with the experimental flag on.

The same as ``PREDISPATCH_VIEWS=1 python SCRIPT ARGS`` where torch's plugin autoload is off
(``TORCH_DEVICE_BACKEND_AUTOLOAD=0``) or the package is not installed: the flag is switched on in this process,
and ``PREDISPATCH_VIEWS=1`` is exported so that processes the script starts (DataLoader or DDP workers) get it
too, through the autoload or their own import of the package.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from .flag import ENV_VAR, enable


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("script", help="the Python script to run, as `python SCRIPT` would")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    parser.set_defaults(run=run_script)


def run_script(args: argparse.Namespace) -> int:
    if not os.path.isfile(args.script):
        print(f"run: error: no such script: {args.script}", file=sys.stderr)
        return 2
    os.environ[ENV_VAR] = "1"
    sys.argv = [args.script, *args.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    with enable():
        runpy.run_path(args.script, run_name="__main__")
    return 0
