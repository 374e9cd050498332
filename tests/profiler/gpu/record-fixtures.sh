#!/bin/bash
# Device run for the profiler fixtures (run from the repo root on the GPU machine; results go to $OUT):
# builds kloop + the CUPTI injection library + the GPU tests, runs them, traces the test program with
# `kloop profile`, and records a PyTorch profiler trace of a small transformer. Files come back gzipped.
set -u
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/kl-fixtures}
B=${BUILD_DIR:-/tmp/kl-build}
mkdir -p "$OUT"
skip=$(ls tests | grep -v -x -e profiler -e CMakeLists.txt | paste -sd';')
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; nvcc --version | tail -1; date -u; } > "$OUT/env.txt" 2>&1
python3 tests/profiler/gpu/record_torch_trace.py "$OUT/h200_transformer_prefill_decode.pt.trace.json" > "$OUT/torch.log" 2>&1 &
torch_pid=$!
t0=$SECONDS
cmake -S . -B "$B" -G Ninja -DKL_BUILD_GUI=OFF -DCMAKE_BUILD_TYPE=Release -DKL_WERROR=OFF -DKL_SKIP_TESTS="$skip" > "$OUT/configure.log" 2>&1
timeout 300 cmake --build "$B" -j 16 --target kloop kl_cupti_inject test_profiler_gpu kl_trace_testprog > "$OUT/build.log" 2>&1 || tail -40 "$OUT/build.log"
echo "build: $((SECONDS - t0)) s"
timeout 120 "$B/tests/profiler/test_profiler_gpu" > "$OUT/gpu-tests.log" 2>&1; echo "gpu tests rc=$?"
grep -E "OK \]|FAILED|SKIPPED|SOL" "$OUT/gpu-tests.log"
timeout 120 "$B/cli/kloop" profile --out "$OUT/h200_kloop_profile_testprog.kltrace" -- "$B/tests/profiler/kl_trace_testprog" > "$OUT/kloop-profile.txt" 2>&1; echo "kloop profile rc=$?"
/usr/bin/time -f "plain testprog wall %e s" "$B/tests/profiler/kl_trace_testprog" >> "$OUT/kloop-profile.txt" 2>&1
wait $torch_pid; echo "torch rc=$?"; tail -3 "$OUT/torch.log"
for f in "$OUT"/*.kltrace "$OUT"/*.pt.trace.json; do [ -f "$f" ] && gzip -9 -f "$f"; done
for f in "$OUT"/*.gz; do "$B/cli/kloop" trace analyze "$f" > "$f.analysis.txt" 2>&1; done
ls -la "$OUT"
