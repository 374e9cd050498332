#!/usr/bin/env python3
"""The kernel-quality table: for each problem's tuning shapes, the best kernel kloop run found against the naive
baseline (timed interleaved with it by the harness), PyTorch eager, torch.compile and the copy-bandwidth bound.
Reads the session directories (journal.jsonl, candidates/<id>/evaluation.json) and torch_baselines.py's JSON."""
import argparse
import json
import os
import sys


def label(dims):
    return ",".join(f"{k}={v}" for k, v in sorted(dims.items()))


def read_journal(d):
    events = []
    with open(os.path.join(d, "journal.jsonl")) as f:
        for line in f:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a torn last line
    return events


def load_session(d):
    events = read_journal(d)
    evals, params, status = {}, {}, {}
    for e in events:
        cid = e.get("candidate")
        if e["kind"] == "candidate-proposed":
            params[cid] = e["data"].get("params", {})
        if e["kind"] in ("candidate-accepted", "candidate-rejected"):
            evals[cid] = e["data"]["evaluation"]
            status[cid] = e["data"].get("status")
        elif e["kind"] == "candidate-status" and cid in evals:  # decided later: a review of a flagged measurement
            status[cid] = e["data"].get("status")
    accepted = [c for c in evals if status.get(c) == "accepted" and evals[c].get("objective", 0) > 0]
    best = max(accepted, key=lambda c: evals[c]["objective"]) if accepted else None
    if best is None:  # nothing beat the baseline: report the template (the second node) if it was measured
        timed = [c for c in evals if any(s.get("timing") for s in evals[c].get("shapes", []))
                 and "fidelity" not in evals[c]]  # a multi-fidelity screen is no measurement of a best
        best = timed[1] if len(timed) > 1 else (timed[0] if timed else None)
    minutes = (events[-1]["t"] - events[0]["t"]) / 60000.0 if events else 0
    return {"best": best, "evals": evals, "params": params, "status": status, "minutes": minutes,
            "measured": len(evals)}


def fmt(x, unit=""):
    return "-" if x is None else f"{x:.1f}{unit}"


def session_rows(name, regime, s, torch_shapes):
    best = s["best"]
    if best is None:
        return [f"| {name}{regime} | (nothing measured) | | | | | | | | | |"]
    ev = s["evals"][best]
    ptext = " ".join(f"{k}={v}" for k, v in sorted(s["params"].get(best, {}).items()))
    rows = []
    for sh in ev.get("shapes", []):
        if sh.get("held_out") or not sh.get("timing"):
            continue
        lab = label(sh["shape"]["dims"])
        t = sh["timing"]["median_us"]
        base = (sh.get("baseline_timing") or {}).get("median_us")
        tr = torch_shapes.get(lab, {})
        eager, comp, copy, flops = tr.get("eager_us"), tr.get("compile_us"), tr.get("copy_us"), tr.get("flops")
        if name.startswith("gemm") and flops and t:
            pct = f"{flops / (t * 1e-6) / 1e12:.0f} TFLOP/s"  # compute-bound: throughput, not the copy roofline
            copy = None
        else:
            pct = f"{100 * copy / t:.0f}%" if copy and t else "-"
        ve = f"{eager / t:.2f}x" if eager and t else "-"
        vc = f"{comp / t:.2f}x" if comp and t else "-"
        rows.append(f"| {name}{regime} | {lab} | {fmt(base)} | {fmt(t)} | {fmt(eager)} | {fmt(comp)} | {fmt(copy)} | "
                    f"{pct} | {ve} | {vc} | {ptext} ({best}) |")
    rows.append(f"| {name}{regime} | {s['measured']} configurations recorded in {s['minutes']:.1f} min, objective "
                f"{ev.get('objective', 0):.3f}x over the {'cuBLAS' if name.startswith('gemm') else 'naive'} "
                f"baseline | | | | | | | | | |")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", required=True)
    ap.add_argument("--torch", required=True)
    ap.add_argument("--search")
    ap.add_argument("--out", required=True)
    ap.add_argument("names", nargs="+")
    args = ap.parse_args()
    torch_res = {}
    if os.path.exists(args.torch):
        with open(args.torch) as f:
            torch_res = json.load(f)
    meta = torch_res.get("_meta", {})
    bw = meta.get("copy_bytes_per_s")
    lines = ["# Tuner benchmarks on the GPU", ""]
    if meta:
        lines.append(f"GPU {meta.get('gpu')}, torch {meta.get('torch')} (CUDA {meta.get('cuda')}), measured copy "
                     f"bandwidth {bw / 1e12:.2f} TB/s (1 GiB device-to-device, read + write)." if bw else "")
        lines.append("")
    lines += ["## Kernel quality: best kernel found by `kloop run --agent tuner:bayes` in the time budget", "",
              "Times in microseconds (median). % copy BW: the problem's fewest bytes / time, over the measured copy "
              "bandwidth (for gemm_bf16: TFLOP/s instead; its baseline and eager are cuBLAS). Baseline: the problem's naive "
              "kernel, timed interleaved with the candidate. A large-shape session tunes one kernel for the prefill "
              "shapes only, as an exported dispatcher would select it there.", "",
              "| problem | shape | naive | best | eager | torch.compile | copy bound | best % copy BW | vs eager | "
              "vs compile | best params |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in args.names:
        for session, regime in ((name, ""), (name + "-large", " (large-shape session)")):
            d = os.path.join(args.sessions, session)
            if not os.path.exists(os.path.join(d, "journal.jsonl")):
                if not regime:
                    lines.append(f"| {name} | (no session: the run failed, see {name}.err) | | | | | | | | | |")
                continue
            lines += session_rows(name, regime, load_session(d), torch_res.get(name, {}))
    if args.search and os.path.exists(args.search):
        lines += ["", "## Search efficiency (replay of the rmsnorm exhaustive sweep from the tuning database)", ""]
        with open(args.search) as f:
            lines.append(f.read())
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
