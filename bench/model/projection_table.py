"""The projection of `kloop trace analyze --session` next to what the exported op changed in the model.

    projection_table.py OUT_DIR   (the folder bench/model/gpu-bench.sh wrote)
"""
import json
import os
import sys

import torch


def load(out, name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)


def rmsnorm_ns(analysis):
    for t in analysis["workload"]["tunable"]:
        if t["problem"] == "rmsnorm":
            return t["gpu_ns"], t["calls"]
    return 0, 0


def main() -> int:
    out = sys.argv[1]
    proj = load(out, "projection.json")["projection"]
    stock, ours = load(out, "stock-analysis.json"), load(out, "ours-analysis.json")
    st, ot = load(out, "stock-timing.json"), load(out, "ours-timing.json")
    s_ns, s_calls = rmsnorm_ns(stock)
    o_ns, o_calls = rmsnorm_ns(ours)
    a = torch.load(os.path.join(out, "stock-logits.pt"))
    b = torch.load(os.path.join(out, "ours-logits.pt"))
    rel = ((a - b).norm() / a.norm()).item()
    same_top = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
    wall = (ot["median_s"] / st["median_s"] - 1) * 100
    kernel_saving = s_ns - o_ns
    print(f"# Session from a trace: projection vs the model (rmsnorm, candidate {proj['candidate']})\n")
    print("| | projected (trace + measured speedups) | measured in the model |")
    print("| --- | --- | --- |")
    print(f"| rmsnorm kernel time per run | saves {proj['saved_ns'] / 1e3:.1f} us of {proj['op_ns'] / 1e3:.1f} us "
          f"| {s_ns / 1e3:.1f} us stock -> {o_ns / 1e3:.1f} us ours ({s_calls}/{o_calls} calls): saves "
          f"{kernel_saving / 1e3:.1f} us |")
    print(f"| share of all kernel time | {proj['kernel_saving_pct']:.2f}% | "
          f"{100 * kernel_saving / max(1, stock['workload']['gpu_ns']):.2f}% |")
    print(f"| end to end (wall, prefill + decode) | {proj['end_to_end_pct']:.2f}% (upper bound "
          f"{proj['upper_bound_pct']:.2f}%) | {wall:+.2f}% ({st['median_s'] * 1e3:.2f} -> {ot['median_s'] * 1e3:.2f} "
          f"ms, median of {len(st['wall_s'])}) |")
    print(f"\nRMSNorm modules replaced: {ot['rmsnorm_replaced']}. Logits (last 8 prefill positions): rel L2 "
          f"{rel:.2e}, same argmax {100 * same_top:.1f}%.")
    for ph in ours["workload"]["phases"]:
        print(f"- phase (ours) {ph['label']}: {ph['bound']}, GPU busy {ph['busy_pct']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
