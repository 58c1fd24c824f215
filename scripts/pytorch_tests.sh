#!/usr/bin/env bash
# PyTorch's own test files, dynamo-wrapped, plain vs stock vs the prototype (issue 21), file by file, with the
# filters the report uses. The test files are not in this repository: pass the root of a PyTorch source tree
# (or of a copy holding test/...), e.g. scripts/pytorch_tests.sh /work/pytorch_tests results/pytorch_tests
# Each file writes OUT/<name>/pytorch_tests.md and CSVs (compare --pytorch-tests). 2 pytest processes at a time.
set -euo pipefail
ROOT=${1:?usage: scripts/pytorch_tests.sh PYTORCH_TREE [OUT]}
OUT=${2:-results/pytorch_tests}
JOBS=${JOBS:-2}
AUTOGRAD_FILTER="view or inplace or in_place or rebase or mutat or version or unbind or split or chunk"

run() {  # run NAME FILE [extra compare arguments...]
    local name=$1 file=$2
    shift 2
    if [[ ! -f "$ROOT/$file" ]]; then
        echo "skip $file: not under $ROOT"
        return
    fi
    echo "== $file"
    python -m predispatch_views compare --pytorch-tests "$ROOT/$file" --jobs "$JOBS" --out "$OUT/$name" "$@" \
        | { grep -E "^\| test/|^## Pass under" || true; }
}

run view_ops test/test_view_ops.py
run functionalization test/test_functionalization.py
run aotdispatch test/functorch/test_aotdispatch.py
run autograd test/test_autograd.py --pytorch-tests-filter "$AUTOGRAD_FILTER"
