#!/usr/bin/env bash
# decode_attention's sm_90 template (issue 16) on the GPU in one call of under 4 minutes: decode-sweep.sh OUTDIR, with
# BUILD_DIR (default build/) holding kloop and kloop-worker.
#  1. The standalone driver (decode_sm90_driver.cu, nvcc) at the defaults (8-token stages 6 deep) and at a ring of
#     16-token stages: the partition check on the CPU, every corner shape against the fp64 reference, then CUDA-graph
#     timings at the tuning shapes against the copy bound and a plain read of the same K/V (driver-*.txt). A plan that
#     hangs ends its driver after 10 s, naming the shape. (nvcc's build of 16-token stages spills 24 bytes where the
#     harness's NVRTC build spills none: that row is a close stand-in, not the harness's binary.)
#  2. kloop eval of template_sm90.cu at its defaults (skipped when the driver found it wrong at its defaults) and of
#     the sm_80 template at its defaults (the harness's verdicts, timed interleaved with the naive baseline;
#     candidate-*.json, *.err).
#  3. SDPA's flash and cuDNN backends on the same sizes contiguous (attention_peers.py --only decode_attention), then
#     the table (attention_table.py): ours vs the copy bound and vs each backend, last.
# Success: both drivers end "all shapes correct", both evals say verdict correct, and the table's sm_90 rows read
# >= 85% of copy bandwidth and >= 0.95x cuDNN at B >= 16.
set -uo pipefail
OUT=${1:?usage: decode-sweep.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
PROBLEM=$ROOT/kernels/problems/decode_attention
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}
mkdir -p "$OUT"
rc=0
driver_ok=()
for point in "TT=8 STAGES=6 MINTOK=32 EVICT=1" "TT=16 STAGES=3 MINTOK=32 EVICT=1"; do
    name=driver-$(echo "$point" | tr ' =' '_-')
    read -ra params <<<"$point"
    echo "== $name"
    # DECODE_DRIVER_DIR: drivers built beforehand with the same nvcc line (on a CPU machine), named like these.
    if [[ -x "${DECODE_DRIVER_DIR:-/nonexistent}/$name" ]]; then
        cp "$DECODE_DRIVER_DIR/$name" "$OUT/$name"
    elif ! "$NVCC" -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a "${params[@]/#/-D}" -o "$OUT/$name" \
        "$ROOT/bench/attention/decode_sm90_driver.cu" >"$OUT/$name.build.log" 2>&1; then
        tail -n 20 "$OUT/$name.build.log"
        rc=1
        continue
    fi
    if timeout 90 "$OUT/$name" >"$OUT/$name.txt" 2>&1; then driver_ok+=("$point"); else rc=1; fi
    cat "$OUT/$name.txt"
done
for file in template_sm90 template_sm80; do
    if [[ $file == template_sm90 && ! " ${driver_ok[*]-} " =~ " TT=8 STAGES=6 MINTOK=32 EVICT=1 " ]]; then
        echo "== kloop eval of $file.cu skipped: its driver failed at the defaults"
        continue
    fi
    echo "== kloop eval decode_attention $file.cu"
    timeout 120 "$BUILD/cli/kloop" eval decode_attention "$PROBLEM/$file.cu" --seconds 0.5 --json \
        >"$OUT/candidate-decode_attention-$file.json" 2>"$OUT/candidate-decode_attention-$file.err" || rc=1
    python3 -c 'import json, sys; e = json.load(open(sys.argv[1])); print("verdict", e.get("verdict"),
        *[r.get("rule", "") + ": " + r.get("message", "")[:200] for r in e.get("reasons", [])], sep="\n  ")' \
        "$OUT/candidate-decode_attention-$file.json" 2>/dev/null || tail -n 5 "$OUT/candidate-decode_attention-$file.err"
done
python3 "$ROOT/bench/attention/attention_peers.py" --problems "$ROOT/kernels/problems" --only decode_attention \
    --out "$OUT/peers.json" >"$OUT/peers.log" 2>&1 || rc=1
tail -n 3 "$OUT/peers.log"
python3 "$ROOT/bench/attention/attention_table.py" --peers "$OUT/peers.json" \
    --candidates "$OUT"/candidate-decode_attention-*.json --out "$OUT/summary.md" || rc=1
cat "$OUT/summary.md"
exit $rc
