#!/usr/bin/env bash
# bench/export/gpu-bench.sh OUT_DIR -- the export path on a GPU box (run by scripts/gpu-check):
#  1. a session: $KL_GPU_SESSION (recorded on this GPU by `kloop run` earlier in gpu-check), else a short
#     `kloop run` of rmsnorm here, else (labelled synthetic) make_export_session;
#  2. `kloop export` (safe by default; a refusal is recorded, then the bench exports with --force to go on);
#  3. the bundle's own CMake project: configure, build, ctest (CPU dispatch test + GPU self-test);
#  4. the PyTorch wrapper: load, compare with torch on fresh inputs, dispatcher choices, CUDA-graph capture.
# Writes summary.md and results.json into OUT_DIR.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-${BENCH_OUT:-$ROOT/export-bench-out}}
BUILD=${BUILD_DIR:-$ROOT/build}
KLOOP=$BUILD/cli/kloop
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
JOBS=${JOBS:-$(nproc)}
declare -A STATUS
log() { echo "[export-bench] $*"; }
step() { # name, command...: output to OUT/name.log, status recorded
    local name=$1; shift
    local t0=$SECONDS
    "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    STATUS[$name]="$([[ $rc == 0 ]] && echo ok || echo "FAIL($rc)") $((SECONDS - t0))s"
    log "$name: ${STATUS[$name]}"
    tail -n 8 "$OUT/$name.log" | sed "s/^/    /"
    return $rc
}

if [[ ! -x "$KLOOP" ]]; then
    log "building kloop and make_export_session"
    cmake --build "$BUILD" -j "$JOBS" --target kloop make_export_session >"$OUT/build-tools.log" 2>&1
fi

SESSION_KIND=real
SESSION=${KL_GPU_SESSION:-}
if [[ -z "$SESSION" || ! -f "$SESSION/session.json" ]]; then
    SESSION=$OUT/session
    rm -rf "$SESSION"
    if step kloop-run "$KLOOP" run --problem "${EXPORT_PROBLEM:-rmsnorm}" --agent tuner:random --budget "${EXPORT_BUDGET:-24}" \
        --session "$SESSION"; then
        SESSION_KIND="real (kloop run here)"
    else
        rm -rf "$SESSION"
        SESSION_KIND="SYNTHETIC measurements (no real session available)"
        [[ -x "$BUILD/bench/export/make_export_session" ]] || cmake --build "$BUILD" --target make_export_session >>"$OUT/build-tools.log" 2>&1
        step make-session "$BUILD/bench/export/make_export_session" "${EXPORT_PROBLEM:-rmsnorm}" "$SESSION"
    fi
fi
log "session: $SESSION ($SESSION_KIND)"

BUNDLE=$OUT/bundle
FORCED=no
rm -rf "$BUNDLE"
# EXPORT_CANDIDATE: one candidate of the session (a session whose every candidate lost to the fallback has no winner).
PICK=${EXPORT_CANDIDATE:+--candidate $EXPORT_CANDIDATE}
if ! step export "$KLOOP" export "$SESSION" --out "$BUNDLE" $PICK --json; then
    # Refused (safe by default): the reasons are in export.log; go on with --force to exercise the build.
    FORCED=yes
    rm -rf "$BUNDLE"
    step export-forced "$KLOOP" export "$SESSION" --out "$BUNDLE" $PICK --force --json
fi

step bundle-configure cmake -S "$BUNDLE" -B "$BUNDLE/build" -G Ninja -DCMAKE_BUILD_TYPE=Release
step bundle-build cmake --build "$BUNDLE/build" -j "$JOBS"
step bundle-ctest ctest --test-dir "$BUNDLE/build" --output-on-failure --timeout 600
cp "$BUNDLE/build/Testing/Temporary/LastTest.log" "$OUT/bundle-ctest-full.log" 2>/dev/null

# The PyTorch wrapper: torch.utils.cpp_extension first; the bundle's CMake-built op library as the second way.
export TORCH_EXTENSIONS_DIR=$OUT/torch-ext
if ! step torch-check python3 "$ROOT/bench/export/check_torch.py" "$BUNDLE" --out "$OUT/torch-check.json"; then
    if step bundle-torch-build bash -c "cmake -S '$BUNDLE' -B '$BUNDLE/build-torch' -G Ninja -DCMAKE_BUILD_TYPE=Release -DKL_BUILD_TORCH=ON && cmake --build '$BUNDLE/build-torch' -j $JOBS"; then
        LIB=$(ls "$BUNDLE"/build-torch/lib*_torch.so 2>/dev/null | head -n 1)
        step torch-check-cmake python3 "$ROOT/bench/export/check_torch.py" "$BUNDLE" --library "$LIB" --out "$OUT/torch-check.json"
    fi
fi

# The pipeline bundle (kloop pipeline export): llama_mlp_decode with the session above for its rmsnorm stage (when it
# tunes rmsnorm), a synthetic silu_and_mul session for its act stage, cuBLAS for both GEMMs. Its ctest runs each
# candidate stage's self-test and pipeline_selftest: the pipeline through its own entry point against the
# all-fallback pipeline, eager and from one CUDA graph; check_pipeline_torch.py then checks torch.ops.kl_llama_mlp_decode
# against the stages' torch references chained.
PIPE=$OUT/pipeline-bundle
rm -rf "$PIPE" "$OUT/session-silu"
[[ -x "$BUILD/bench/export/make_export_session" ]] || cmake --build "$BUILD" --target make_export_session >>"$OUT/build-tools.log" 2>&1
step pipeline-act-session "$BUILD/bench/export/make_export_session" silu_and_mul "$OUT/session-silu"
PIPE_STAGES=(--stage "act=$OUT/session-silu")
[[ "${EXPORT_PROBLEM:-rmsnorm}" == rmsnorm ]] && PIPE_STAGES+=(--stage "norm=$SESSION")
PIPE_FORCED=no
if ! step pipeline-export "$KLOOP" pipeline export llama_mlp_decode "${PIPE_STAGES[@]}" --out "$PIPE" --json; then
    PIPE_FORCED=yes
    step pipeline-export-forced "$KLOOP" pipeline export llama_mlp_decode "${PIPE_STAGES[@]}" --out "$PIPE" --force --json
fi
step pipeline-configure cmake -S "$PIPE" -B "$PIPE/build" -G Ninja -DCMAKE_BUILD_TYPE=Release
step pipeline-build cmake --build "$PIPE/build" -j "$JOBS"
step pipeline-ctest ctest --test-dir "$PIPE/build" --output-on-failure --timeout 600
cp "$PIPE/build/Testing/Temporary/LastTest.log" "$OUT/pipeline-ctest-full.log" 2>/dev/null
if step pipeline-torch-build bash -c "cmake -S '$PIPE' -B '$PIPE/build-torch' -G Ninja -DCMAKE_BUILD_TYPE=Release -DKL_BUILD_TORCH=ON && cmake --build '$PIPE/build-torch' -j $JOBS"; then
    step pipeline-torch-check python3 "$ROOT/bench/export/check_pipeline_torch.py" "$PIPE" \
        --library "$PIPE/build-torch/libkl_llama_mlp_decode_torch.so" --out "$OUT/pipeline-torch-check.json"
fi

SELFTEST_LOG=$OUT/bundle-ctest.log
{
    echo "# export bench $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    echo "- session: $(basename "$SESSION") ($SESSION_KIND); export forced: $FORCED"
    echo
    echo "| step | result |"
    echo "|---|---|"
    for k in kloop-run make-session export export-forced bundle-configure bundle-build bundle-ctest torch-check bundle-torch-build torch-check-cmake \
        pipeline-act-session pipeline-export pipeline-export-forced pipeline-configure pipeline-build pipeline-ctest pipeline-torch-build pipeline-torch-check; do
        [[ -n "${STATUS[$k]:-}" ]] && echo "| $k | ${STATUS[$k]} |"
    done
    echo
    if [[ $FORCED == yes ]]; then
        echo "Refusals (kloop export without --force):"
        echo '```'
        grep -E "^\s+- |refus" "$OUT/export.log" | head -n 20
        echo '```'
    fi
    echo "Dispatch table (from the bundle's header):"
    echo '```'
    API_HEADER=$(ls "$BUNDLE"/include/*.h 2>/dev/null | grep -v "_dispatch.h" | head -n 1)
    [[ -n "$API_HEADER" ]] && sed -n '/Dispatch table/,/select_why/p' "$API_HEADER" | head -n 20
    echo '```'
    echo "Self-test (bundle ctest):"
    echo '```'
    grep -E "time:|speedup|dispatch:|verified|SELFTEST|graph|FAIL|device:" "$BUNDLE/build/Testing/Temporary/LastTest.log" 2>/dev/null | head -n 60
    echo '```'
    echo "Pipeline bundle (llama_mlp_decode; export forced: $PIPE_FORCED), its ctest:"
    echo '```'
    grep -E "^stage |^shape|pipeline |graph|time \(graph\)|verified|PIPELINE SELFTEST|FAIL|SELFTEST" "$OUT/pipeline-ctest-full.log" 2>/dev/null | head -n 80
    echo '```'
    echo "Pipeline PyTorch op against the torch reference and the all-fallback pipeline:"
    echo '```'
    grep -E "^(ok|FAIL|skip|note)|TORCH PIPELINE" "$OUT/pipeline-torch-check.log" 2>/dev/null | head -n 40
    echo '```'
    echo "PyTorch wrapper:"
    echo '```'
    grep -E "^(ok|FAIL)|dispatch outside|TORCH CHECK|loaded" "$OUT"/torch-check*.log 2>/dev/null | head -n 40
    echo '```'
} >"$OUT/summary.md"
cat "$OUT/summary.md"

python3 - "$OUT" "$SESSION_KIND" "$FORCED" <<'PY' 2>/dev/null
import json, os, sys
out, kind, forced = sys.argv[1:4]
r = {"session_kind": kind, "forced": forced == "yes"}
for name in ("torch-check.json", "pipeline-torch-check.json"):
    p = os.path.join(out, name)
    if os.path.exists(p):
        r[name.replace("-check.json", "").replace("-", "_")] = json.load(open(p))
json.dump(r, open(os.path.join(out, "results.json"), "w"), indent=2)
PY

for k in bundle-build bundle-ctest pipeline-build pipeline-ctest pipeline-torch-check; do
    [[ "${STATUS[$k]:-FAIL}" == ok* ]] || exit 1
done
[[ "${STATUS[torch-check]:-}" == ok* || "${STATUS[torch-check-cmake]:-}" == ok* ]] || exit 1
exit 0
