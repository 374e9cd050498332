#!/bin/bash
# Device run for the profiler fixtures (run from the repo root on the GPU machine; results go to $OUT):
# builds the profiler-only kloop, the CUPTI injection library and the GPU tests, runs them, traces the test
# program with `kloop profile`, and records a PyTorch profiler trace of a small transformer (gzipped).
# Everything printed also lands in $OUT/run.log (the device tool brings back at most 8 files).
set -u
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/kl-fixtures}
B=${BUILD_DIR:-/tmp/kl-build}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
export PYTHONUNBUFFERED=1
skip=$(ls tests | grep -v -x -e profiler -e CMakeLists.txt | paste -sd';')
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; nvcc --version | tail -1; date -u
python3 tests/profiler/gpu/record_torch_trace.py "$OUT/h200_transformer_prefill_decode.pt.trace.json" > /tmp/torch.log 2>&1 &
torch_pid=$!
t0=$SECONDS
cmake -S . -B "$B" -G Ninja -DKL_BUILD_GUI=OFF -DCMAKE_BUILD_TYPE=Release -DKL_WERROR=OFF -DKL_SKIP_TESTS="$skip" > /tmp/configure.log 2>&1 || tail -30 /tmp/configure.log
timeout 300 cmake --build "$B" -j 16 --target kloop_profiler_only kl_cupti_inject test_profiler_gpu kl_trace_testprog > /tmp/build.log 2>&1 || tail -40 /tmp/build.log
echo "== build: $((SECONDS - t0)) s"
echo "== gpu tests"
timeout 150 "$B/tests/profiler/test_profiler_gpu"; echo "gpu tests rc=$?"
echo "== kloop profile"
t1=$SECONDS
timeout 120 "$B/tests/profiler/kloop_profiler_only" profile --out "$OUT/h200_kloop_profile_testprog.kltrace" -- "$B/tests/profiler/kl_trace_testprog"; echo "kloop profile rc=$? wall $((SECONDS - t1)) s"
t1=$SECONDS; "$B/tests/profiler/kl_trace_testprog"; echo "plain testprog wall $((SECONDS - t1)) s"
wait $torch_pid; echo "== torch rc=$?"; cat /tmp/torch.log
for f in "$OUT"/*.kltrace "$OUT"/*.pt.trace.json; do [ -f "$f" ] && gzip -9 -f "$f"; done
for f in "$OUT"/*.gz; do echo "== kloop trace analyze $f"; "$B/tests/profiler/kloop_profiler_only" trace analyze "$f" 2>/dev/null; done
ls -la "$OUT"
