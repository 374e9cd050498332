#!/usr/bin/env bash
# rmsnorm at a decode shape, profiled by ncu on every side with L2 flushed before each profiled launch (ncu's
# --cache-control all, the cold-L2 row of the peer table): why KernelLoop's decode kernel trails Liger's there.
#   decode-profile.sh OUT [MINUTES]   (BUILD_DIR set; Liger from .whl/ or requirements-peers.txt)
# A decode-only tuner:bayes session of MINUTES (default 0.5) is exported; then decode_profile.py launches each side's
# op 5 times under ncu, which profiles the 4th launch (skipping warm-up and torch.compile's own kernels by name).
# Writes OUT/ncu-<side>.txt (SpeedOfLight, MemoryWorkloadAnalysis, WarpStateStats, SchedulerStats, LaunchStats,
# Occupancy, and each warp's stall cycles by reason: round 18 found the gap there) and OUT/winner.txt (the exported
# winner's parameters). KL_DECODE_BUNDLES=DIR profiles bundles exported before (DIR/rmsnorm) instead of a new session.
set -uo pipefail
OUT=${1:?usage: decode-profile.sh OUT [MINUTES]}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
KLOOP=$BUILD/cli/kloop
SHAPE=${KL_DECODE_SHAPE:-T=16,H=8192}
mkdir -p "$OUT"
rc=0
BUNDLES=${KL_DECODE_BUNDLES:-}
if [[ -z $BUNDLES ]]; then
    BUNDLES=$OUT/bundles
    "$KLOOP" run --problem rmsnorm --shapes "$SHAPE;T=256,H=8192" --agent tuner:bayes --minutes "${2:-0.5}" \
        --session "$OUT/session" --json >"$OUT/session.jsonl" 2>"$OUT/session.err" || rc=1
    "$KLOOP" export "$OUT/session" --out "$BUNDLES/rmsnorm" --overwrite >"$OUT/export.log" 2>&1 \
        || "$KLOOP" export "$OUT/session" --out "$BUNDLES/rmsnorm" --overwrite --force >>"$OUT/export.log" 2>&1 || rc=1
fi
python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); print(json.dumps(m.get("regimes", m.get("candidate"))))' \
    "$BUNDLES/rmsnorm/manifest.json" >"$OUT/winner.txt" 2>&1
if ls "$ROOT"/.whl/liger_kernel-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site-peers "$ROOT"/.whl/liger_kernel-*.whl \
        && export PYTHONPATH=/tmp/site-peers${PYTHONPATH:+:$PYTHONPATH}
fi
STALLS=$(printf 'smsp__average_warp_latency_issue_stalled_%s.ratio,' long_scoreboard short_scoreboard wait barrier \
    branch_resolving no_instruction imc_miss drain math_pipe_throttle not_selected selected)
for side in kernelloop liger compile; do
    ncu --clock-control none --cache-control all --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
        --metrics "${STALLS}sm__cycles_active.max,smsp__inst_executed.sum,dram__bytes_read.sum" \
        -k 'regex:rms|triton_|_norm' --launch-skip 3 --launch-count 1 \
        python3 "$ROOT/bench/tuner/decode_profile.py" --problems "$ROOT/kernels/problems" --bundles "$BUNDLES" \
        --dims "$SHAPE" rmsnorm "$side" >"$OUT/ncu-$side.txt" 2>&1 || rc=1
    grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|Registers Per|Block Size|Grid Size|Achieved Occupancy|stalled_|sm__cycles_active|inst_executed|dram__bytes_read" \
        "$OUT/ncu-$side.txt" | sed -e "s/smsp__average_warp_latency_issue_//" -e "s/^/$side: /" | head -30
done
exit $rc
