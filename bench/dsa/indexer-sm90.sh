#!/usr/bin/env bash
# Issue 19's indexer target (>= 85% of the copy bandwidth at the tuning shapes) on one H200 call:
# indexer-sm90.sh OUTDIR, with BUILD_DIR set to a built tree (default build/). kloop eval of the portable template
# (mma.sync, synchronous pages) and of the sm_90a template (TMA ring + wgmma) at its defaults and five other points,
# each verified (held-out shapes included) then timed interleaved with the baseline; the table of time, share of the
# copy bandwidth, share of a cold read of the same bytes (copy_at_size.py) and verdict per tuning shape comes last
# (indexer_table.py). With test_hopper_gpu built, its DsaIndexerSm90Gpu tests run first (the template across its
# space; dropped tokens and pages caught).
# About 2-3 minutes of GPU time.
set -uo pipefail
OUT=${1:?usage: indexer-sm90.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
PROBLEM=$ROOT/kernels/problems/dsa_indexer
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}
mkdir -p "$OUT"
rc=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1

if [[ -x "$BUILD/tests/kernels/test_hopper_gpu" ]]; then
    echo "== test_hopper_gpu --gtest_filter='DsaIndexerSm90Gpu.*'"
    timeout 150 "$BUILD/tests/kernels/test_hopper_gpu" --gtest_filter='DsaIndexerSm90Gpu.*' >"$OUT/gtest.txt" 2>&1 || rc=1
    grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) ' "$OUT/gtest.txt"
fi

# name, candidate file, parameters (-: its defaults); the problem is this checkout's (its arch_templates included)
runs=("template $PROBLEM/template.cu -"
      "sm90 $PROBLEM/template_sm90.cu -"
      "sm90-c1s2 $PROBLEM/template_sm90.cu CONSUMERS=1,STAGES=2"
      "sm90-c1s6 $PROBLEM/template_sm90.cu CONSUMERS=1,STAGES=6"
      "sm90-c2s4 $PROBLEM/template_sm90.cu CONSUMERS=2,STAGES=4"
      "sm90-c3s9 $PROBLEM/template_sm90.cu CONSUMERS=3,STAGES=9"
      "sm90-c2s8-noevict $PROBLEM/template_sm90.cu CONSUMERS=2,STAGES=8,EVICT=0")
evals=()
for run in "${runs[@]}"; do
    read -r name file params <<<"$run"
    args=(eval "$PROBLEM" "$file" --seconds 0.5 --json)
    [[ "$params" != - ]] && args+=(--params "$params")
    echo "== kloop ${args[*]}"
    timeout 90 "$BUILD/cli/kloop" "${args[@]}" >"$OUT/$name.json" 2>"$OUT/$name.err" || rc=1
    tail -n 2 "$OUT/$name.err"
    evals+=("$name=$OUT/$name.json")
done
# The roofline at each shape's own size: a cold read-only pass over the same bytes (PyTorch, graph-replayed).
read_at=()
mapfile -t sizes < <(python3 "$ROOT/bench/dsa/indexer_table.py" --problem "$PROBLEM" --sizes)
python3 "$ROOT/bench/dsa/copy_at_size.py" --gbps "${KL_COPY_GBPS:-4240}" --json "$OUT/read-at-size.json" "${sizes[@]}" \
    >"$OUT/read-at-size.txt" 2>&1 && read_at=(--read-at-size "$OUT/read-at-size.json") || tail -n 3 "$OUT/read-at-size.txt"
python3 "$ROOT/bench/dsa/indexer_table.py" --problem "$PROBLEM" "${read_at[@]}" "${evals[@]}" | tee "$OUT/summary.md" || rc=1
exit $rc
