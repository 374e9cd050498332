#!/usr/bin/env bash
# Records the MLA hypothesis session (issue 16) on the GPU; scripts/gpu-check runs it as gpu-bench.sh OUTDIR
# (BUILD_DIR set): BENCHES=mla-demo scripts/gpu-check build,benches. About 5 minutes of GPU time.
#  1. kloop run --problem mla_decode --agent llm:vllm --hypothesis "<the engineer's idea>" --budget 3: the naive
#     baseline, the head-group template (the head), then the model's candidate. The "model" is scripted_model.py,
#     an OpenAI-compatible stand-in on loopback replaying reply.md (written by a person) with the candidate
#     $KL_MLA_CANDIDATE (default bench/attention/mla_hypothesis/shared_kv.cu, human-authored) in it; it logs
#     every request it gets (scripted-model-requests.jsonl: the prompt carried the hypothesis).
#  2. The review: the candidate's win over the template is far past the session's jump factor, so the referee sends
#     it to a person (physics.suspicious-jump); `kloop session review --approve` stands in for the engineer for that
#     reason alone (recording.py pending), labelled so in PROVENANCE.json.
#  3. kloop run --resume with --agent llm:vllm+tuner:$KL_MLA_TUNER (default bayes): the tuner searches the
#     accepted candidate's parameters (KL_MLA_TUNER_BUDGET evaluations, default 24, at most KL_MLA_TUNER_MINUTES,
#     default 2.5).
#  4. kloop profile --sol of the template (before) and of the best candidate (after) against the naive baseline
#     at KL_MLA_PROFILE_SHAPE (default B=64,SQ=1,MAXP=128): traces/*.kltrace for the workbench's timeline, the SOL
#     table (DRAM bytes against the problem's bytes, the bound) in sol.md and PROVENANCE.json.
#  5. recording.py: PROVENANCE.json, and a check of the story (exit 1 and the reasons when it does not hold).
#     Its source_commit is git's HEAD of this checkout, or KL_SOURCE_COMMIT when the checkout's git is stale.
# Output: OUTDIR/demo-session-mla/ laid out like resources/demo-session/ (session.json, journal.jsonl, candidates/,
# traces/, PROVENANCE.json), also as demo-session-mla.tar.gz; copy it to resources/demo-session-mla/.
# Tuning shapes: KL_MLA_SHAPES (kloop run --shapes; default B=64,SQ=1,MAXP=128;B=128,SQ=1,MAXP=256); the session's
# id: KL_MLA_SESSION_ID (default h200-mla-hypothesis-session).
set -uo pipefail
OUT=$(mkdir -p "${1:?usage: gpu-bench.sh OUTDIR}" && cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
KLOOP=$BUILD/cli/kloop
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}
CANDIDATE=${KL_MLA_CANDIDATE:-$ROOT/bench/attention/mla_hypothesis/shared_kv.cu}
SHAPES=${KL_MLA_SHAPES:-B=64,SQ=1,MAXP=128;B=128,SQ=1,MAXP=256}
PROFILE_SHAPE=${KL_MLA_PROFILE_SHAPE:-B=64,SQ=1,MAXP=128}
TUNER=${KL_MLA_TUNER:-bayes}
TUNER_BUDGET=${KL_MLA_TUNER_BUDGET:-24}
TUNER_MINUTES=${KL_MLA_TUNER_MINUTES:-2.5}
MODEL=scripted-stand-in-human-reply
SESSION_ID=${KL_MLA_SESSION_ID:-h200-mla-hypothesis-session}
HYPOTHESIS="load each latent KV block once per CTA, share it across all 128 heads, and pipeline the next block's load under the current block's math"
REVIEW_NOTE="the shared-KV kernel is human-authored; its only review reason is the size of the win over the head-group template, which reads every KV block once per head group (kloop profile --sol below shows the DRAM bytes)"
SESSION=$OUT/demo-session-mla
REQUESTS=$OUT/scripted-model-requests.jsonl
COMMANDS=$OUT/commands.txt

if [[ ! -f "$CANDIDATE" ]]; then
    echo "mla-demo: no candidate at $CANDIDATE (the hypothesis kernel; KL_MLA_CANDIDATE names another file)" >&2
    exit 1
fi
rm -rf "$SESSION" "$OUT/scripted-model.port"
: >"$COMMANDS"
run() { # logs the exact command (kloop for the binary's path, an argument with spaces or quotes in '...'), runs it
    local line="" arg
    for arg in "$@"; do
        [[ "$arg" == "$KLOOP" ]] && arg=kloop
        [[ "$arg" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]] || arg="'${arg//\'/\'\\\'\'}'"
        line+="${line:+ }$arg"
    done
    echo "$line" >>"$COMMANDS"
    "$@"
}

python3 "$HERE/scripted_model.py" --reply "$HERE/reply.md" --candidate "$CANDIDATE" --log "$REQUESTS" \
    --port-file "$OUT/scripted-model.port" --model "$MODEL" 2>"$OUT/scripted-model.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 100); do [[ -s "$OUT/scripted-model.port" ]] && break; sleep 0.1; done
if [[ ! -s "$OUT/scripted-model.port" ]]; then
    echo "mla-demo: the scripted model did not start:" >&2
    cat "$OUT/scripted-model.log" >&2
    exit 1
fi
URL=http://127.0.0.1:$(cat "$OUT/scripted-model.port")/v1

rc=0
echo "== kloop run --problem mla_decode --agent llm:vllm --hypothesis ... (scripted model at $URL)"
run "$KLOOP" run --problem mla_decode --agent llm:vllm --llm-base-url "$URL" --llm-model "$MODEL" --auto-approve \
    --hypothesis "$HYPOTHESIS" --shapes "$SHAPES" --budget 3 --minutes 3 --no-tuning-db \
    --id "$SESSION_ID" --session "$SESSION" --json >"$OUT/run-1-llm.jsonl" 2>"$OUT/run-1-llm.err" || rc=1
tail -n 1 "$OUT/run-1-llm.jsonl" | cut -c1-400; tail -n 3 "$OUT/run-1-llm.err"

# The engineer's review: a win of more than the session's jump factor over the best waits for a person
# (physics.suspicious-jump). The recording approves it in the engineer's place for that reason alone
# (recording.py pending), as `kloop session review`, which the resumed run applies before its first proposal.
if CID=$(python3 "$HERE/recording.py" pending "$SESSION" --candidate "$CANDIDATE"); then
    echo "== kloop session review $CID --approve"
    run "$KLOOP" session review "$SESSION" "$CID" --approve --note "$REVIEW_NOTE" >"$OUT/review.log" 2>&1 || rc=1
    cat "$OUT/review.log"
fi

echo "== kloop run --resume ... --agent llm:vllm+tuner:$TUNER --budget +$TUNER_BUDGET --minutes $TUNER_MINUTES"
run "$KLOOP" run --resume "$SESSION" --agent "llm:vllm+tuner:$TUNER" --budget "$((3 + TUNER_BUDGET))" \
    --minutes "$TUNER_MINUTES" --no-tuning-db --json >"$OUT/run-2-tuner.jsonl" 2>"$OUT/run-2-tuner.err" || rc=1
tail -n 1 "$OUT/run-2-tuner.jsonl" | cut -c1-400; tail -n 3 "$OUT/run-2-tuner.err"

mkdir -p "$SESSION/traces"
read -r TEMPLATE WINNER < <(python3 "$HERE/recording.py" nodes "$SESSION")
echo "== kloop profile --sol: the template $TEMPLATE (before) and the best $WINNER (after) at $PROFILE_SHAPE"
run "$KLOOP" profile --sol --session "$SESSION" --node "$TEMPLATE" --shape "$PROFILE_SHAPE" \
    --out "$SESSION/traces/1-before-template-$TEMPLATE.kltrace" --json >"$OUT/sol-before.json" 2>"$OUT/sol-before.err" \
    || rc=1
run "$KLOOP" profile --sol --session "$SESSION" --node "$WINNER" --shape "$PROFILE_SHAPE" \
    --out "$SESSION/traces/2-after-best-$WINNER.kltrace" --json >"$OUT/sol-after.json" 2>"$OUT/sol-after.err" || rc=1
tail -n 2 "$OUT/sol-before.err" "$OUT/sol-after.err"

python3 "$HERE/recording.py" finish "$SESSION" --problem "$ROOT/kernels/problems/mla_decode" --candidate "$CANDIDATE" \
    --hypothesis "$HYPOTHESIS" --requests "$REQUESTS" --commands "$COMMANDS" --sol-before "$OUT/sol-before.json" \
    --sol-after "$OUT/sol-after.json" --shape "$PROFILE_SHAPE" --root "$ROOT" --summary "$OUT/sol.md" || rc=1
cat "$OUT/sol.md"
tar czf "$OUT/demo-session-mla.tar.gz" -C "$OUT" demo-session-mla
echo "== the recording: $SESSION (also demo-session-mla.tar.gz); to ship it: rm -rf resources/demo-session-mla &&"
echo "   tar xzf demo-session-mla.tar.gz -C resources, then kernelloop --screenshot resources/screenshots --screenshot-set mla"
exit $rc
