#!/usr/bin/env python3
"""The attention decode table: per tuning shape, the naive baseline and the best kernel kloop run found (timed
interleaved by the harness; --sessions, optional), then each candidate kloop eval timed (--candidates
candidate-<problem>-<name>[@<params>].json), with its share of the measured copy bandwidth (the problem's fewest
bytes / time), its TFLOP/s and their share of the bf16 peak (peaks.py), and the SDPA peers on contiguous data
(attention_peers.py): the fastest backend, and the flash and cuDNN backends' times over ours."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tuner"))
from quality_table import label, load_session  # noqa: E402  (one reader of session directories)
from peaks import BF16_TFLOPS, tflops_text  # noqa: E402


def fmt(x):
    return "-" if x is None else f"{x:.1f}"


def shape_rows(name, evaluation, peers, what):
    """One table row per timed tuning shape of evaluation (a session's best or a kloop eval), what in the last column."""
    rows = []
    for sh in evaluation.get("shapes", []):
        if sh.get("held_out") or not sh.get("timing"):
            continue
        lab = label(sh["shape"]["dims"])
        t = sh["timing"]["median_us"]
        base = (sh.get("baseline_timing") or {}).get("median_us")
        pr = peers.get(name, {}).get(lab, {})
        sdpa = [(k, pr[k]) for k in ("flash", "cudnn", "efficient", "math") if k in pr]
        best_peer = min(sdpa, key=lambda kv: kv[1]) if sdpa else None
        copy = pr.get("copy_us")
        versus = [f"{pr[k] / t:.2f}x" if k in pr and t else "-" for k in ("flash", "cudnn")]
        rows.append(
            f"| {name} | {lab} | {fmt(base)} | {fmt(t)} | {fmt(copy)} | "
            f"{f'{100 * copy / t:.0f}%' if copy and t else '-'} | {tflops_text(pr.get('flops'), t)} | "
            f"{f'{best_peer[1]:.1f} ({best_peer[0]})' if best_peer else '-'} | "
            f"{f'{best_peer[1] / t:.2f}x' if best_peer and t else '-'} | {versus[0]} | {versus[1]} | {what} |")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", help="a directory of kloop run sessions named after their problems (optional)")
    ap.add_argument("--peers", required=True)
    ap.add_argument("--candidates", nargs="*", default=[],
                    help="kloop eval --json outputs named candidate-<problem>-<name>[@<params>].json")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.peers) as f:
        peers = json.load(f)
    meta = peers.get("_meta", {})
    bw = meta.get("copy_bytes_per_s", 0)
    lines = ["# Attention decode on the GPU", "",
             f"GPU {meta.get('gpu')}, torch {meta.get('torch')} (CUDA {meta.get('cuda')}), measured copy bandwidth "
             f"{bw / 1e12:.2f} TB/s. Times in microseconds (medians). Ours: paged KV (a permuted page table, lengths "
             "ending inside the last page); SDPA: the same sizes contiguous, timed as the harness times decode (K/V "
             "sets rotated over 2x L2, CUDA-graph replays; do_bench's figures, whose flush leaves the L2 dirty, are in "
             "peers.json). TFLOP/s with "
             f"its share of the bf16 peak ({BF16_TFLOPS:.0f} TFLOP/s, cuBLAS).", "",
             "| problem | shape | naive | best | copy bound | best % copy BW | TFLOP/s (% peak) | SDPA | best vs SDPA "
             "| vs flash | vs cuDNN | best params |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in ("decode_attention", "mla_decode") if args.sessions else ():
        d = os.path.join(args.sessions, name)
        if not os.path.exists(os.path.join(d, "journal.jsonl")):
            lines.append(f"| {name} | (no session: see {name}.err) | | | | | | | | | | |")
            continue
        s = load_session(d)
        if s["best"] is None:
            lines.append(f"| {name} | (nothing measured) | | | | | | | | | | |")
            continue
        ev = s["evals"][s["best"]]
        ptext = " ".join(f"{k}={v}" for k, v in sorted(s["params"].get(s["best"], {}).items()))
        lines += shape_rows(name, ev, peers, f"{ptext} ({s['best']})")
        lines.append(f"| {name} | {s['measured']} configurations in {s['minutes']:.1f} min, objective "
                     f"{ev.get('objective', 0):.3f}x over the naive baseline | | | | | | | | | | |")
    for path in args.candidates:
        stem = os.path.basename(path)[len("candidate-"):-len(".json")]
        name = next((n for n in ("decode_attention", "mla_decode") if stem.startswith(n + "-")), None)
        try:
            with open(path) as f:
                ev = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            lines.append(f"| {name or stem} | (candidate {stem}: no evaluation: {e}) | | | | | | | | | | |")
            continue
        file, _, params = (stem[len(name) + 1:] if name else stem).partition("@")
        what = f"candidate {file}.cu {'with ' + params if params else 'at its defaults'}, verdict {ev.get('verdict')}"
        lines += shape_rows(name or stem, ev, peers, what)
    errors = [(n, lab, k, v) for n in ("decode_attention", "mla_decode") for lab, r in peers.get(n, {}).items()
              for k, v in r.items() if k.endswith("_error")]
    if errors:
        lines += ["", "SDPA backends that refused a shape:", ""]
        lines += [f"- {n} {lab} {k[:-6]}: {v}" for n, lab, k, v in errors]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
