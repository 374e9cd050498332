#!/usr/bin/env bash
# The Triton comparison on a GPU machine: builds kloop + kloop-worker, tunes the CUDA and the Triton templates of
# rmsnorm and softmax with `kloop run` (tuner:bayes, the same budget each), times Liger-Kernel on the same shapes,
# runs an honest and a cheating Triton candidate through `kloop eval`, and writes the tables to $OUT/triton-compare.md.
#   OUT=dir BUDGET=24 MINUTES=0.7 bench/triton/run-h200.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/triton-compare-out}
BUILD=${BUILD_DIR:-$ROOT/build}
WORK=$(mktemp -d)
mkdir -p "$OUT"
export KL_CACHE_DIR=$WORK/cache
log() { echo "== $*"; }
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
    python3 -c 'import triton, torch; print("triton", triton.__version__, "torch", torch.__version__)'
    cat COMMIT 2>/dev/null
} | tee "$OUT/environment.txt"
log build
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DKL_BUILD_GUI=OFF -DCMAKE_BUILD_TYPE=Release -DKL_WERROR=OFF >"$WORK/configure.log" 2>&1 \
    && cmake --build "$BUILD" -j "$(nproc)" --target kloop kloop-worker >"$WORK/build.log" 2>&1 \
    || { tail -n 40 "$WORK/configure.log" "$WORK/build.log"; exit 1; }
KLOOP=$BUILD/cli/kloop
for p in rmsnorm softmax; do
    for lang in cuda triton; do
        log "run $p $lang"
        "$KLOOP" run --problem $p --language $lang --agent tuner:bayes --budget "${BUDGET:-24}" --minutes "${MINUTES:-0.7}" \
            --no-tuning-db --session "$WORK/$p-$lang" >"$WORK/run-$p-$lang.log" 2>&1
        echo "rc=$?"; tail -n 3 "$WORK/run-$p-$lang.log"
    done
done
log liger
if [[ -d .whl ]]; then python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site; fi
PYTHONUNBUFFERED=1 python3 bench/triton/liger_times.py >"$WORK/liger.json" 2>"$WORK/liger.err" || tail -n 30 "$WORK/liger.err"
cp "$WORK/liger.json" "$OUT/liger.json"; cp "$WORK/liger.err" "$OUT/liger-err.txt"
{
    cat "$OUT/environment.txt"
    for p in rmsnorm softmax; do
        python3 bench/triton/compare.py --problem $p --cuda "$WORK/$p-cuda" --triton "$WORK/$p-triton" --liger "$WORK/liger.json"
    done
} >"$OUT/triton-compare.md" 2>&1
cat "$OUT/triton-compare.md"
log "eval: an honest Triton candidate, then a cheat the static rules do not see (it drops rows past 4096)"
"$KLOOP" eval rmsnorm tests/triton/gpu/rmsnorm_honest.py --json >"$WORK/eval-honest.json" 2>"$WORK/eval-honest.err"; echo "honest rc=$?"
"$KLOOP" eval rmsnorm tests/triton/gpu/rmsnorm_drops_rows.py --json >"$WORK/eval-cheat.json" 2>"$WORK/eval-cheat.err"; echo "cheat rc=$?"
python3 - "$WORK/eval-honest.json" "$WORK/eval-cheat.json" <<'PY' | tee "$OUT/triton-evals.txt"
import json, sys
for p in sys.argv[1:]:
    try:
        j = json.load(open(p))
    except Exception as e:
        print(p, "unreadable:", e, open(p).read()[-2000:]); continue
    ev = j.get("evaluation", j)
    print(p.split("/")[-1], "verdict", ev.get("verdict"), "objective", ev.get("objective"),
          "reasons", [(r.get("rule"), r.get("message", "")[:160]) for r in ev.get("reasons", [])])
PY
tar czf "$OUT/sessions.tar.gz" -C "$WORK" rmsnorm-cuda rmsnorm-triton softmax-cuda softmax-triton \
    $(cd "$WORK" && ls *.log *.json 2>/dev/null) 2>/dev/null
