#!/usr/bin/env bash
# Performance tables on a CUDA machine, in under 10 minutes.
#
#   scripts/gpu_bench.sh [OUT_DIR] [DEVICE]      OUT_DIR defaults to results/gpu, DEVICE to cuda
#   scripts/gpu_bench.sh /tmp/bench cpu          the same run on CPU, to test the script without a GPU
#
# Installs the package (with the plot extra) if it is not importable, then runs the performance section once
# per inner backend, each in its own process under its own time limit, so that one slow inner still leaves
# the other's tables: OUT_DIR/inductor/{perf.md,perf.csv,scaling.png} and OUT_DIR/aot_eager/...
# Ratios to eager and stock are from the same process, so each folder is self-contained.
# Then scripts/cudagraph_check.py: CUDA graph trees (mode="reduce-overhead") with the prototype against eager and
# stock: training parity, view nodes, graphs really captured, stale-output reads -> OUT_DIR/cudagraphs/.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${1:-results/gpu}"
DEVICE="${2:-cuda}"
PYTHON="${PYTHON:-python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PYTHON" -c "import predispatch_views" 2>/dev/null; then
    # No dependencies and no build isolation: never replace the machine's (CUDA) torch, and work offline.
    "$PYTHON" -m pip install --quiet --no-deps --no-build-isolation -e .
fi
"$PYTHON" -c "import matplotlib" 2>/dev/null || "$PYTHON" -m pip install --quiet "matplotlib>=3.7" \
    || echo "gpu_bench.sh: matplotlib unavailable, tables only" >&2

if [ "$DEVICE" = "cuda" ] && ! "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    echo "gpu_bench.sh: --device cuda but torch.cuda.is_available() is False here; pass 'cpu' as the second argument to run on CPU" >&2
    exit 2
fi

mkdir -p "$OUT"
status=0
# inner backend, seconds allowed: inductor first (the interesting one on a GPU), 270 + 150 + 120 s (CUDA graph
# check below) < 10 min with setup.
for spec in inductor:270 aot_eager:150; do
    inner="${spec%%:*}"
    limit="${spec##*:}"
    echo "== $inner on $DEVICE (limit ${limit} s) -> $OUT/$inner"
    if ! timeout --signal=INT --kill-after=15 "$limit" "$PYTHON" -m predispatch_views.compare.benchmarks \
        --device "$DEVICE" --inner "$inner" --min-run-time 0.1 --step-cap 0.5 --out "$OUT/$inner" \
        > "$OUT/$inner.log" 2>&1; then
        echo "gpu_bench.sh: the $inner run failed or ran out of time, see $OUT/$inner.log" >&2
        status=1
    fi
    tail -n 30 "$OUT/$inner.log"
done

echo "== CUDA graph trees (reduce-overhead) with the prototype on $DEVICE -> $OUT/cudagraphs"
if ! timeout --signal=INT --kill-after=15 120 "$PYTHON" scripts/cudagraph_check.py --device "$DEVICE" \
    --out "$OUT/cudagraphs" > "$OUT/cudagraphs.log" 2>&1; then
    echo "gpu_bench.sh: the CUDA graph check failed or ran out of time, see $OUT/cudagraphs.log" >&2
    status=1
fi
tail -n 20 "$OUT/cudagraphs.log"
exit $status
