#!/usr/bin/env bash
# The wgmma MLA decode kernels on an H200, in one device call (about 2-3 minutes): builds the standalone driver
# (driver.cu: the candidate files included as the harness compiles them) and runs, each in its own process so that a
# fault leaves the other findings standing:
#   probes       the candidates' wgmma sequences and the tensor map on one warpgroup, against fp64
#   dense/sparse the whole kernels against the problems' reference kernels on fresh random data (and the mma.sync
#                kernels on the same data, as the driver's own control)
#   time-*       new vs mma.sync, interleaved CUDA-event medians, TFLOP/s
# then, where BUILD_DIR (default build/) holds kloop, the harness's verdict on both candidates (EVAL_OLD=1 adds the
# mma.sync ones). Usage: gpu-run.sh OUTDIR. MLA_WGMMA_DRIVER=path runs a driver built beforehand instead (on a CPU
# machine: the nvcc line below, about 20 s). Details under OUTDIR; the summary is printed last.
set -uo pipefail
OUT=${1:?usage: gpu-run.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
HERE=$ROOT/bench/attention/mla_wgmma
BUILD=${BUILD_DIR:-$ROOT/build}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DRIVER=${MLA_WGMMA_DRIVER:-$OUT/mla_wgmma_driver}
summary=()

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1
if [ -z "${MLA_WGMMA_DRIVER:-}" ]; then
    echo "== nvcc driver.cu"
    start=$(date +%s)
    if ! "$NVCC" -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Xptxas -v -o "$DRIVER" "$HERE/driver.cu" \
        -lcuda >"$OUT/build.log" 2>&1; then
        tail -n 40 "$OUT/build.log"
        echo "driver build FAILED"
        exit 1
    fi
    echo "built in $(($(date +%s) - start)) s"
fi
# Registers and spills of the two kernels (the launch bounds cap them at 168; setmaxnreg moves 128 x 128 to the
# consumers at run time), and from the SASS where cuobjdump exists: HGMMA count (124: S 3 x 36, P V 4 x 4), local
# memory traffic (0) and the highest register the consumers touch (<= 231).
grep -A2 "Function properties for \(mla_decode_wgmma\|sparse_mla_decode_wgmma\)$" "$OUT/build.log" 2>/dev/null
if command -v cuobjdump >/dev/null; then
    for k in mla_decode_wgmma sparse_mla_decode_wgmma; do
        cuobjdump --dump-sass --function "$k" "$DRIVER" >"$OUT/$k.sass" 2>/dev/null
        echo "$k SASS: HGMMA $(grep -c HGMMA "$OUT/$k.sass"), LDL/STL $(grep -c 'LDL\|STL' "$OUT/$k.sass"), highest \
register R$(grep -o '\bR[0-9]\+' "$OUT/$k.sass" | tr -d R | sort -n | tail -n 1)"
    done
fi

for mode in probes dense sparse time-dense time-sparse; do
    echo "== driver $mode"
    start=$(date +%s)
    timeout 170 "$DRIVER" "$mode" >"$OUT/driver-$mode.log" 2>&1
    rc=$?
    cat "$OUT/driver-$mode.log"
    case $rc in
    0) verdict=ok ;;
    1) verdict=FAILURES ;;
    3) verdict=HANG ;;
    124) verdict=TIMEOUT ;;
    *) verdict="ERROR rc=$rc" ;;
    esac
    summary+=("driver $mode: $verdict ($(($(date +%s) - start)) s)")
done

if [ -x "$BUILD/cli/kloop" ]; then
    export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}
    candidates=("mla_decode bench/attention/mla_hypothesis/shared_kv_wgmma.cu"
        "sparse_mla_decode kernels/problems/sparse_mla_decode/template_sm90.cu")
    if [ "${EVAL_OLD:-0}" = 1 ]; then
        candidates+=("mla_decode bench/attention/mla_hypothesis/shared_kv.cu"
            "sparse_mla_decode kernels/problems/sparse_mla_decode/template_mma_sync.cu")
    fi
    for c in "${candidates[@]}"; do
        set -- $c
        name=$(basename "$2" .cu)
        echo "== kloop eval $1 $2"
        start=$(date +%s)
        timeout 120 "$BUILD/cli/kloop" eval "$1" "$ROOT/$2" --seconds 0.3 --held-out 3 >"$OUT/eval-$1-$name.txt" \
            2>"$OUT/eval-$1-$name.err"
        rc=$?
        cat "$OUT/eval-$1-$name.txt"
        tail -n 5 "$OUT/eval-$1-$name.err"
        summary+=("kloop eval $1 $name: $(grep -m1 '^verdict' "$OUT/eval-$1-$name.txt" || echo "rc=$rc") \
$(grep -m1 '^objective' "$OUT/eval-$1-$name.txt") ($(($(date +%s) - start)) s)")
    done
else
    summary+=("kloop eval: skipped, no $BUILD/cli/kloop")
fi

echo
echo "== summary"
for line in "${summary[@]}"; do
    echo "$line"
done
# The timing tables, the whole point of the run.
grep -h "^| \(dense\|sparse\)" "$OUT"/driver-time-*.log 2>/dev/null
