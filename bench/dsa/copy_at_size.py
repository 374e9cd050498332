"""The copy bandwidth a plain copy reaches at a kernel's own size: for each BYTES given, a device-to-device copy of
BYTES / 2 (read plus written: BYTES moved), over rotating buffers of more than twice the L2 (each copy starts cold),
20 copies per CUDA graph replayed, median of the replays. A small memory-bound kernel's share of the 1 GiB copy
bandwidth is then read against what a copy of its size gets, the part of the gap that size alone explains. A kernel
that mostly reads (the indexer) is read against the second figure: a sum of BYTES of bf16 into one fp32, read only.

usage: python3 copy_at_size.py --gbps 4240 [--json FILE] NAME=BYTES ...   (NAME may hold '='; --json: each NAME's
bytes, copy_us and read_us, for indexer_table.py --read-at-size)
"""
import argparse
import json
import statistics

import torch


def copy_us(nbytes: int, l2_bytes: int, reps: int = 30) -> float:
    half = max(16, nbytes // 2 // 16 * 16)
    sets = max(2, -(-2 * l2_bytes // half) + 1)
    src = [torch.empty(half, dtype=torch.uint8, device="cuda").fill_(1) for _ in range(sets)]
    dst = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(sets)]
    return replay_us(lambda i: dst[i % sets].copy_(src[i % sets]), sets, reps)


def read_us(nbytes: int, l2_bytes: int, reps: int = 30) -> float:
    n = max(8, nbytes // 16 * 8)
    sets = max(2, -(-2 * l2_bytes // (2 * n)) + 1)
    src = [torch.ones(n, dtype=torch.bfloat16, device="cuda") for _ in range(sets)]
    dst = [torch.empty((), dtype=torch.float32, device="cuda") for _ in range(sets)]
    return replay_us(lambda i: torch.sum(src[i % sets], dim=0, dtype=torch.float32, out=dst[i % sets]), sets, reps)


def replay_us(op, sets: int, reps: int) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(sets):
            op(i)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(20):
                op(i)
    torch.cuda.current_stream().wait_stream(stream)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / 20)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gbps", type=float, required=True, help="the 1 GiB copy bandwidth the shares are taken of")
    ap.add_argument("--json", help="write {NAME: {bytes, copy_us, read_us}} here too")
    ap.add_argument("sizes", nargs="+", help="NAME=BYTES")
    args = ap.parse_args()
    results = {}
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"{torch.cuda.get_device_name(0)}, L2 {l2 >> 20} MiB, torch {torch.__version__}")
    print("| size | bytes moved | copy us | share of the copy bandwidth | read-only us | share |")
    print("|---|---|---|---|---|---|")
    for item in args.sizes:
        name, nbytes = item.rsplit("=", 1)
        b = int(float(nbytes))
        share = lambda us: f"{100 * b / (us * 1e-6) / (args.gbps * 1e9):.0f}%"
        cu, ru = copy_us(b, l2), read_us(b, l2)
        print(f"| {name} | {b / 1e6:.1f} MB | {cu:.2f} | {share(cu)} | {ru:.2f} | {share(ru)} |")
        results[name] = {"bytes": b, "copy_us": cu, "read_us": ru}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
