"""The copy bandwidth a plain copy reaches at a kernel's own size: for each BYTES given, a device-to-device copy of
BYTES / 2 (read plus written: BYTES moved), over rotating buffers of more than twice the L2 (each copy starts cold),
20 copies per CUDA graph replayed, median of the replays. A small memory-bound kernel's share of the 1 GiB copy
bandwidth is then read against what a copy of its size gets, the part of the gap that size alone explains.

usage: python3 copy_at_size.py --gbps 4240 NAME=BYTES ...
"""
import argparse
import statistics

import torch


def copy_us(nbytes: int, l2_bytes: int, reps: int = 30) -> float:
    half = max(16, nbytes // 2 // 16 * 16)
    sets = max(2, -(-2 * l2_bytes // half) + 1)
    src = [torch.empty(half, dtype=torch.uint8, device="cuda").fill_(1) for _ in range(sets)]
    dst = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(sets)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(sets):
            dst[i].copy_(src[i])
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(20):
                dst[i % sets].copy_(src[i % sets])
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
    ap.add_argument("sizes", nargs="+", help="NAME=BYTES")
    args = ap.parse_args()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"{torch.cuda.get_device_name(0)}, L2 {l2 >> 20} MiB, torch {torch.__version__}")
    print("| size | bytes moved | copy us | share of the copy bandwidth |")
    print("|---|---|---|---|")
    for item in args.sizes:
        name, nbytes = item.split("=")
        us = copy_us(int(float(nbytes)), l2)
        print(f"| {name} | {int(float(nbytes)) / 1e6:.1f} MB | {us:.2f} | {100 * int(float(nbytes)) / (us * 1e-6) / (args.gbps * 1e9):.0f}% |")


if __name__ == "__main__":
    main()
