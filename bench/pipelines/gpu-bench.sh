#!/usr/bin/env bash
# Pipelines on the GPU (issue #19); scripts/gpu-check runs it as: gpu-bench.sh OUTDIR (BUILD_DIR set).
# kloop pipeline run of every shipped pipeline at its tuning shapes (llama_decoder_decode and llama_mlp_decode at
# T = 1, 16, 64; dsa_decode at B = 64..128), each result JSON (the workbench's pipeline view opens it) and one
# table: end to end under one CUDA graph and eager against the all-baseline pipeline, MFU/MBU and the stage shares;
# and one of each output's end-to-end budget (the honest errors, the derived tolerance) and the timed re-checks.
set -uo pipefail
OUT=${1:?usage: gpu-bench.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}
mkdir -p "$OUT"
rc=0
"$BUILD/cli/kloop" pipeline validate >"$OUT/validate.log" 2>&1 || rc=1
cat "$OUT/validate.log"
# KL_PIPELINES: pipeline folders to run instead of the shipped ones (e.g. a copy whose stages run tuned candidates),
# separated by ':' so that a folder's name may hold spaces.
if [[ -n "${KL_PIPELINES:-}" ]]; then
    IFS=: read -r -a dirs <<<"$KL_PIPELINES"
else
    dirs=("$ROOT"/kernels/pipelines/*/)
fi
for dir in "${dirs[@]}"; do
    p=$(basename "$dir")
    echo "== kloop pipeline run $p"
    # exit 1 is a rejected pipeline: its reasons are in the table, not a failure of the bench
    "$BUILD/cli/kloop" pipeline run "$dir" --max-seconds "${KL_PIPELINE_SECONDS:-3}" --out "$OUT/$p.json" \
        >"$OUT/$p.txt" 2>"$OUT/$p.err"
    [[ -s "$OUT/$p.json" ]] || rc=1
    cat "$OUT/$p.txt"; tail -n 3 "$OUT/$p.err"
done
python3 - "$OUT" >"$OUT/summary.md" <<'PY' || rc=1
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
# "e2e / stages": the pipeline's graph time over the sum of its stages' graph times, each stage timed alone (issue 19:
# within 10%, i.e. chaining the stages costs little beyond their own time).
print("| pipeline | shape | graph us | all-baseline graph us | speedup [95% CI] | eager us | eager speedup | MFU | MBU | stage shares | e2e / stages | verdict |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for f in sorted(out.glob("*.json")):
    r = json.loads(f.read_text())
    for s in r["shapes"]:
        g, bg, e = s.get("graph", {}), s.get("baseline_graph", {}), s.get("eager", {})
        shares = ", ".join(f"{st['stage']} {100 * st['share']:.0f}%" for st in s["stages"])
        stage_sum = sum(st.get("graph", {}).get("median_us", float("nan")) for st in s["stages"])
        e2e = g.get("median_us", float("nan")) / stage_sum if stage_sum > 0 else float("nan")  # nan: a stage untimed
        print(f"| {r['pipeline']} | {','.join(f'{k}={v}' for k, v in s['shape']['dims'].items())} | "
              f"{g.get('median_us', float('nan')):.2f} | {bg.get('median_us', float('nan')):.2f} | "
              f"{s['speedup']:.3f} [{s['speedup_ci_low']:.3f}, {s['speedup_ci_high']:.3f}] | "
              f"{e.get('median_us', float('nan')):.2f} | {s['eager_speedup']:.3f} | {100 * s['mfu']:.1f}% | "
              f"{100 * s['mbu']:.1f}% | {shares} | {e2e:.3f} | "
              f"{'accepted' if r['accepted'] else 'rejected'} |")
print()
print("End-to-end budgets (rel_l2 / max_abs against the chained fp64 references; tolerance = 8x the larger honest error,")
print("never below the floor, the producing problem's own tolerance) and the timed re-checks:")
print()
print("| pipeline | shape | output | floor | fp32 chain | all-baseline | tolerance | pipeline | timed re-checks passed |")
print("|---|---|---|---|---|---|---|---|---|")
def pair(e):
    return f"{e['rel_l2']:.3g} / {e['max_abs']:.3g}" if e.get("valid", True) else "not measured"
for f in sorted(out.glob("*.json")):
    r = json.loads(f.read_text())
    for s in r["shapes"]:
        timed = [c for c in s.get("checks", []) if c.get("distribution", "").startswith("timed:")]
        passed = f"{sum(1 for c in timed if c.get('passed'))}/{len(timed)}"
        for b in s.get("budgets", []):
            print(f"| {r['pipeline']} | {','.join(f'{k}={v}' for k, v in s['shape']['dims'].items())} | {b['output']} | "
                  f"{pair(b['floor'])} | {pair(b['fp32_chain'])} | {pair(b['all_baseline'])} | "
                  f"{pair(b['tolerance'])} | {pair(b['pipeline'])} | {passed} |")
PY
cat "$OUT/summary.md"
exit $rc
