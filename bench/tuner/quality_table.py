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


def load_session(d):
    events = []
    with open(os.path.join(d, "journal.jsonl")) as f:
        for line in f:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a torn last line
    evals, params, status = {}, {}, {}
    for e in events:
        cid = e.get("candidate")
        if e["kind"] == "candidate-proposed":
            params[cid] = e["data"].get("params", {})
        if e["kind"] in ("candidate-accepted", "candidate-rejected"):
            evals[cid] = e["data"]["evaluation"]
            status[cid] = e["data"].get("status")
    accepted = [c for c in evals if status.get(c) == "accepted" and evals[c].get("objective", 0) > 0]
    best = max(accepted, key=lambda c: evals[c]["objective"]) if accepted else None
    if best is None:  # nothing beat the baseline: report the template (the second node) if it was measured
        timed = [c for c in evals if any(s.get("timing") for s in evals[c].get("shapes", []))]
        best = timed[1] if len(timed) > 1 else (timed[0] if timed else None)
    minutes = (events[-1]["t"] - events[0]["t"]) / 60000.0 if events else 0
    return {"best": best, "evals": evals, "params": params, "status": status, "minutes": minutes,
            "measured": len(evals)}


def fmt(x, unit=""):
    return "-" if x is None else f"{x:.1f}{unit}"


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
              "bandwidth. Baseline: the problem's naive kernel, timed interleaved with the candidate.", "",
              "| problem | shape | naive | best | eager | torch.compile | copy bound | best % copy BW | vs eager | "
              "vs compile | best params |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in args.names:
        d = os.path.join(args.sessions, name)
        if not os.path.exists(os.path.join(d, "journal.jsonl")):
            lines.append(f"| {name} | (no session: the run failed, see {name}.err) | | | | | | | | | |")
            continue
        s = load_session(d)
        best = s["best"]
        if best is None:
            lines.append(f"| {name} | (nothing measured) | | | | | | | | | |")
            continue
        ev = s["evals"][best]
        ptext = " ".join(f"{k}={v}" for k, v in sorted(s["params"].get(best, {}).items()))
        for sh in ev.get("shapes", []):
            if sh.get("held_out") or not sh.get("timing"):
                continue
            lab = label(sh["shape"]["dims"])
            t = sh["timing"]["median_us"]
            base = (sh.get("baseline_timing") or {}).get("median_us")
            tr = torch_res.get(name, {}).get(lab, {})
            eager, comp, copy = tr.get("eager_us"), tr.get("compile_us"), tr.get("copy_us")
            pct = f"{100 * copy / t:.0f}%" if copy and t else "-"
            ve = f"{eager / t:.2f}x" if eager and t else "-"
            vc = f"{comp / t:.2f}x" if comp and t else "-"
            lines.append(f"| {name} | {lab} | {fmt(base)} | {fmt(t)} | {fmt(eager)} | {fmt(comp)} | {fmt(copy)} | "
                         f"{pct} | {ve} | {vc} | {ptext} ({best}) |")
        lines.append(f"| {name} | {s['measured']} configurations recorded in {s['minutes']:.1f} min, objective "
                     f"{ev.get('objective', 0):.3f}x over the naive baseline | | | | | | | | | |")
    if args.search and os.path.exists(args.search):
        lines += ["", "## Search efficiency (replay of the rmsnorm exhaustive sweep from the tuning database)", ""]
        with open(args.search) as f:
            lines.append(f.read())
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
