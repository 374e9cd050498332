#!/bin/bash
# GPU part of the profiler bench, run by scripts/gpu-check with an output dir: traces the profiler test program
# with `kloop profile` (CUPTI injection) and reports the capture's size, the run's wall time with and without
# tracing, and the bottleneck summary. Needs BUILD_DIR with kloop_profiler_only and kl_trace_testprog built
# (the test_profiler_gpu target builds both).
set -u
out=${1:-${BENCH_OUT:-/tmp/kl-profiler-gpu}}
build=${BUILD_DIR:-build}
mkdir -p "$out"
kloop=$build/tests/profiler/kloop_profiler_only
prog=$build/tests/profiler/kl_trace_testprog
if [ ! -x "$kloop" ] || [ ! -x "$prog" ]; then
  cmake --build "$build" --target kloop_profiler_only kl_trace_testprog kl_cupti_inject >/dev/null 2>&1 || true
fi
[ -x "$kloop" ] && [ -x "$prog" ] || { echo "profiler gpu bench: targets not built"; exit 1; }
t0=$(date +%s.%N); "$prog" > /dev/null; t1=$(date +%s.%N)
"$kloop" profile --quiet --out "$out/testprog.kltrace" -- "$prog" > /dev/null 2> "$out/profile.err"; rc=$?
t2=$(date +%s.%N)
"$kloop" trace analyze "$out/testprog.kltrace" > "$out/analysis.txt" 2>/dev/null
"$kloop" trace analyze --json "$out/testprog.kltrace" > "$out/analysis.json" 2>/dev/null
{
  echo "# profiler GPU bench ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null))"
  echo
  awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "- test program wall: plain %.3f s, under kloop profile %.3f s (includes CUPTI init and the trace import)\n", b - a, c - b }' 
  echo "- kloop profile exit code $rc; capture $(stat -c %s "$out/testprog.kltrace" 2>/dev/null) bytes"
  echo
  echo '```'
  cat "$out/analysis.txt"
  echo '```'
} > "$out/profiler-gpu.md"
cat "$out/profiler-gpu.md"
exit $rc
