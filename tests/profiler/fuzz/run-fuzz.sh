#!/bin/bash
# Builds the importer fuzzer with clang + libFuzzer + ASan/UBSan and runs it on the committed corpus.
# usage: tests/profiler/fuzz/run-fuzz.sh [seconds=300] [workdir=/tmp/kl-fuzz]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
secs=${1:-300}
work=${2:-/tmp/kl-fuzz}
mkdir -p "$work/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DKL_PROFILER_HAVE_ZLIB=1 -I"$root" \
  "$here/fuzz_importers.cpp" "$root/profiler/json_reader.cpp" "$root/profiler/chrome_import.cpp" \
  "$root/profiler/kltrace_import.cpp" "$root/profiler/trace.cpp" -lz -o "$work/fuzz_importers"
# The committed corpus stores each input with its mode byte already in front.
cp -n "$root"/tests/profiler/fuzz-corpus/*/* "$work/corpus/" 2>/dev/null || true
"$work/fuzz_importers" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 "$work/corpus"
