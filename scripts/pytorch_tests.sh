#!/usr/bin/env bash
# PyTorch's own test files, stock vs the prototype (issue 21), file by file, with the filters the report uses.
# The test files are not in this repository: pass the root of a PyTorch source tree (or of a copy holding test/...),
# e.g. scripts/pytorch_tests.sh /work/pytorch_tests results/pytorch_tests
# Each file writes OUT/<name>/pytorch_tests.md and CSVs (compare --pytorch-tests). JOBS pytest processes at a time.
# Modes (compare/pytorch_tests.py): test_view_ops.py and test_autograd.py run dynamo-wrapped (plain, stock =
# PYTORCH_TEST_WITH_AOT_EAGER=1, prototype = the same through the prototype); test_aotdispatch.py and
# test_functionalization.py, which test AOTAutograd and functionalization themselves, run swapped (stock = the file
# as written, prototype = its own aot_function/aot_module/torch.compile calls routed through the prototype).
set -euo pipefail
ROOT=${1:?usage: scripts/pytorch_tests.sh PYTORCH_TREE [OUT]}
OUT=${2:-results/pytorch_tests}
JOBS=${JOBS:-2}
AUTOGRAD_FILTER="view or inplace or in_place or rebase or mutat or version or unbind or split or chunk"
# test_aotdispatch.py: its AOTAutograd tests; the OpInfo/ModuleInfo sweeps (thousands of tests) are left out, and so
# are TestAOTAutogradWithDynamo/WithCache: they rerun TestAOTAutograd through torch.compile with the test's own
# callable backend around aot_module_simplified, which the swap leaves stock (nothing of the prototype is reached).
AOTDISPATCH_FILTER="(TestAOTAutograd and not WithDynamo and not WithCache) or TestAOTDispatch or TestAOTModuleSimplified or TestPartitioning"

run() {  # run NAME FILE [extra compare arguments...]
    local name=$1 file=$2
    shift 2
    if [[ ! -f "$ROOT/$file" ]]; then
        echo "skip $file: not under $ROOT"
        return
    fi
    echo "== $file"
    python -m predispatch_views compare --pytorch-tests "$ROOT/$file" --jobs "$JOBS" --out "$OUT/$name" "$@" \
        | { grep -E "^\| test/|^## Pass under|^By kind" || true; }
}

run view_ops test/test_view_ops.py
run autograd test/test_autograd.py --pytorch-tests-filter "$AUTOGRAD_FILTER"
run functionalization test/test_functionalization.py
run aotdispatch test/functorch/test_aotdispatch.py --pytorch-tests-filter "$AOTDISPATCH_FILTER"
