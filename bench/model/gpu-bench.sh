#!/usr/bin/env bash
# bench/model/gpu-bench.sh OUT_DIR -- a session from a profile, and its projection checked in the model (issue
# "From a profile to a session"), on a GPU box (run by scripts/gpu-check with BENCHES=model):
#  1. kloop session new --from-trace (the recorded Llama trace in resources/traces), kloop run on it;
#  2. kloop trace analyze --session: the projected saving of the best candidate (Amdahl, per shape);
#  3. kloop export, and the exported op swapped into the same Hugging Face Llama for its RMSNorm: traces and wall
#     times of the stock and the patched model, logits compared; the measured change next to the projection.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/model-bench-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
KLOOP=${BUILD_DIR:-$ROOT/build}/cli/kloop
TRACE=${MODEL_TRACE:-$ROOT/resources/traces/h200-llama-decode.pt.trace.json.gz}
S=$OUT/session
export PYTHONUNBUFFERED=1
rm -rf "$S" "$OUT/bundle"
set -x
"$KLOOP" session new "$S" --problem rmsnorm --from-trace "$TRACE" --json >"$OUT/session-new.json" || exit 1
"$KLOOP" run --resume "$S" --agent "${MODEL_AGENT:-tuner:bayes}" --budget "${MODEL_BUDGET:-24}" --no-tuning-db \
    >"$OUT/run.log" 2>&1 || { tail -20 "$OUT/run.log"; exit 1; }
"$KLOOP" trace analyze "$TRACE" --json --session "$S" >"$OUT/projection.json" 2>/dev/null || exit 1
"$KLOOP" export "$S" --out "$OUT/bundle" --json >"$OUT/export.json" 2>&1 ||
    "$KLOOP" export "$S" --out "$OUT/bundle" --force --json >"$OUT/export.json" 2>&1 || exit 1
python3 "$ROOT/bench/model/llama_trace.py" --out "$OUT/stock.json.gz" --timing "$OUT/stock-timing.json" \
    --logits "$OUT/stock-logits.pt" || exit 1
python3 "$ROOT/bench/model/llama_trace.py" --out "$OUT/ours.json.gz" --timing "$OUT/ours-timing.json" \
    --logits "$OUT/ours-logits.pt" --rmsnorm-bundle "$OUT/bundle" || exit 1
"$KLOOP" trace analyze "$OUT/stock.json.gz" --json >"$OUT/stock-analysis.json" 2>/dev/null
"$KLOOP" trace analyze "$OUT/ours.json.gz" --json >"$OUT/ours-analysis.json" 2>/dev/null
set +x
python3 "$ROOT/bench/model/projection_table.py" "$OUT" | tee "$OUT/summary.md"
