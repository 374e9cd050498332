#!/usr/bin/env bash
# bench/model/gpu-bench.sh OUT_DIR -- a session from a profile, and its projection checked in the model (issue
# "From a profile to a session"), on a GPU box (run by scripts/gpu-check with BENCHES=model):
#  1. kloop session new --from-trace (the recorded Llama trace in resources/traces), kloop run on it;
#  2. kloop trace analyze --session: the projected saving of the best candidate (Amdahl, per shape);
#  3. kloop export, and the exported op swapped into the same Hugging Face Llama for its RMSNorm: traces and wall
#     times of the stock and the patched model, logits compared; the measured change next to the projection.
# Issue 19 (engagement proof and decoder-layer peers), after that:
#  4. a short kloop run + kloop export of silu_and_mul and decode_attention (the rmsnorm bundle from 3. is reused);
#  5. swap_llama.py: those bundles in a HF Llama (prefill 1024 + 64 decode, CUDA graphs both sides) vs stock, at batch
#     1 and 16: decode tokens/s, logits agreement, profiler count of kl_* kernels -> swap-b<B>/swap-llama.{md,json};
#  6. decoder_layer_peers.py: one decoder layer's decode step at B = 1, 16, 64 as eager, torch.compile and CUDA
#     graph with MFU/MBU; KernelLoop columns from PIPELINE_RESULT (kloop pipeline run llama_decoder_decode --out).
# Run: BENCHES=model scripts/gpu-check benches   (PIPELINE_RESULT=path/llama_decoder_decode.json optional: absent,
#      the decoder layer runs with the stages tuned here, bench/model/tuned_pipeline.py;
#      MODEL_SWAP_BUDGET candidates per extra session, default 16; MODEL_SKIP_PROJECTION=1 leaves out 1-3 and
#      exports rmsnorm like the others, to fit the device tool's 10 minutes a command)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/model-bench-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
KLOOP=${BUILD_DIR:-$ROOT/build}/cli/kloop
TRACE=${MODEL_TRACE:-$ROOT/resources/traces/h200-llama-decode.pt.trace.json.gz}
S=$OUT/session
export PYTHONUNBUFFERED=1
projection_bench() {
    rm -rf "$S" "$OUT/bundle"
    set -x
    "$KLOOP" session new "$S" --problem rmsnorm --from-trace "$TRACE" --json >"$OUT/session-new.json" || return 1
    "$KLOOP" run --resume "$S" --agent "${MODEL_AGENT:-tuner:bayes}" --budget "${MODEL_BUDGET:-24}" --no-tuning-db \
        >"$OUT/run.log" 2>&1 || { tail -20 "$OUT/run.log"; return 1; }
    "$KLOOP" trace analyze "$TRACE" --json --session "$S" >"$OUT/projection.json" 2>/dev/null || return 1
    "$KLOOP" export "$S" --out "$OUT/bundle" --json >"$OUT/export.json" 2>&1 ||
        "$KLOOP" export "$S" --out "$OUT/bundle" --force --json >"$OUT/export.json" 2>&1 || return 1
    python3 "$ROOT/bench/model/llama_trace.py" --out "$OUT/stock.json.gz" --timing "$OUT/stock-timing.json" \
        --logits "$OUT/stock-logits.pt" || return 1
    python3 "$ROOT/bench/model/llama_trace.py" --out "$OUT/ours.json.gz" --timing "$OUT/ours-timing.json" \
        --logits "$OUT/ours-logits.pt" --rmsnorm-bundle "$OUT/bundle" || return 1
    "$KLOOP" trace analyze "$OUT/stock.json.gz" --json >"$OUT/stock-analysis.json" 2>/dev/null
    "$KLOOP" trace analyze "$OUT/ours.json.gz" --json >"$OUT/ours-analysis.json" 2>/dev/null
    set +x
    python3 "$ROOT/bench/model/projection_table.py" "$OUT" | tee "$OUT/summary.md"
}

# Issue 19. A bundle whose session or export fails is left out: swap_llama.py then runs stock for that op, saying so.
export_bundle() { # problem -> $OUT/bundle-<problem>
    local p=$1 s=$OUT/session-$1
    rm -rf "$s" "$OUT/bundle-$p"
    "$KLOOP" run --problem "$p" --agent tuner:random --budget "${MODEL_SWAP_BUDGET:-16}" --session "$s" \
        >"$OUT/run-$p.log" 2>&1 || { tail -5 "$OUT/run-$p.log"; return 1; }
    "$KLOOP" export "$s" --out "$OUT/bundle-$p" --json >"$OUT/export-$p.json" 2>&1 ||
        "$KLOOP" export "$s" --out "$OUT/bundle-$p" --force --json >"$OUT/export-$p.json" 2>&1
}

rc=0
SWAP_ARGS=()
if [[ -z "${MODEL_SKIP_PROJECTION:-}" ]]; then
    projection_bench || rc=1
    [[ -f "$OUT/bundle/manifest.json" ]] && SWAP_ARGS+=(--rmsnorm-bundle "$OUT/bundle")
else
    export_bundle rmsnorm && SWAP_ARGS+=(--rmsnorm-bundle "$OUT/bundle-rmsnorm")
fi
export_bundle silu_and_mul && SWAP_ARGS+=(--silu-bundle "$OUT/bundle-silu_and_mul")
export_bundle decode_attention && SWAP_ARGS+=(--attention-bundle "$OUT/bundle-decode_attention")
# The decoder layer with the stages tuned here (the exported candidate of each session; the rest as shipped), so the
# KernelLoop columns of step 6 are KernelLoop's kernels, not the pipeline's baselines.
if [[ -z "${PIPELINE_RESULT:-}" ]]; then
    "$KLOOP" run --problem add_rmsnorm --agent tuner:random --budget "${MODEL_SWAP_BUDGET:-16}" \
        --session "$OUT/session-add_rmsnorm" >"$OUT/run-add_rmsnorm.log" 2>&1 || tail -5 "$OUT/run-add_rmsnorm.log"
    "$KLOOP" export "$OUT/session-add_rmsnorm" --out "$OUT/bundle-add_rmsnorm" --json >"$OUT/export-add_rmsnorm.json" 2>&1
    python3 "$ROOT/bench/model/tuned_pipeline.py" --pipeline "$ROOT/kernels/pipelines/llama_decoder_decode" \
        --out "$OUT/llama_decoder_tuned" --stage attn="$OUT/session-decode_attention" \
        --stage act="$OUT/session-silu_and_mul" --stage norm1="$OUT/session-add_rmsnorm" \
        --stage norm2="$OUT/session-add_rmsnorm" &&
        "$KLOOP" pipeline run "$OUT/llama_decoder_tuned" --out "$OUT/llama_decoder_tuned.json" \
            >"$OUT/pipeline-tuned.log" 2>&1 && PIPELINE_RESULT=$OUT/llama_decoder_tuned.json
    tail -n 30 "$OUT/pipeline-tuned.log"
fi
export TORCH_EXTENSIONS_DIR=$OUT/torch-ext
# Batch 1 and 16 (MODEL_SWAP_BATCHES): the exported kernels run only at shapes their sessions verified faster.
for b in ${MODEL_SWAP_BATCHES:-1 16}; do
    python3 "$ROOT/bench/model/swap_llama.py" --batch "$b" --out-dir "$OUT/swap-b$b" "${SWAP_ARGS[@]}" \
        >"$OUT/swap-b$b.log" 2>&1 || rc=1
    tail -n 40 "$OUT/swap-b$b.log"
done
PEERS_ARGS=()
[[ -n "${PIPELINE_RESULT:-}" ]] && PEERS_ARGS+=(--pipeline-result "$PIPELINE_RESULT")
python3 "$ROOT/bench/model/decoder_layer_peers.py" --out-dir "$OUT/peers" "${PEERS_ARGS[@]}" >"$OUT/peers.log" 2>&1 ||
    rc=1
tail -n 20 "$OUT/peers.log"
cat "$OUT"/swap-b*/swap-llama.md "$OUT/peers/decoder-layer-peers.md" >>"$OUT/summary.md" 2>/dev/null
exit $rc
