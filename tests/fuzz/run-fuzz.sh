#!/bin/bash
# Builds the fuzz targets with clang, libFuzzer and ASan/UBSan in a build folder of their own and runs one target
# on its seed corpus. usage: tests/fuzz/run-fuzz.sh TARGET [seconds=300] [workdir=/tmp/kl-fuzz]
# TARGET: expressions | annotations | problem_json | llm_replies | traces (the order of fuzz_targets.cpp).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${1:?usage: run-fuzz.sh TARGET [seconds] [workdir]}
secs=${2:-300}
work=${3:-/tmp/kl-fuzz}
names=(expressions annotations problem_json llm_replies traces)
index=-1
for i in "${!names[@]}"; do [[ ${names[$i]} == "$target" ]] && index=$i; done
[[ $index -ge 0 ]] || { echo "unknown target $target (${names[*]})" >&2; exit 2; }
cmake -S "$root" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DKL_FUZZ_LIBFUZZER=ON -DKL_WERROR=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined" >/dev/null
cmake --build "$work/build" --target kl_fuzz_libfuzzer
# libFuzzer inputs carry the target index as their first byte.
corpus="$work/corpus-$target"
mkdir -p "$corpus"
add_seed() { { printf "\\x$(printf %02x "$index")"; cat "$1"; } > "$corpus/seed-$(basename "$1")"; }
for f in "$here/corpus/$target"/*; do [[ -f $f ]] && add_seed "$f"; done
case $target in
  annotations) for f in "$root"/kernels/problems/*/*.cu; do add_seed "$f"; done ;;
  problem_json) for f in "$root"/kernels/problems/*/problem.json; do add_seed "$f"; done ;;
  traces) for f in "$root"/tests/profiler/fuzz-corpus/chrome/*; do { printf "\\x$(printf %02x "$index")"; tail -c +2 "$f"; } > "$corpus/seed-$(basename "$f")"; done ;;
esac
"$work/build/tests/fuzz/kl_fuzz_libfuzzer" -max_total_time="$secs" -max_len=1048576 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 "$corpus"
