"""Liger-Kernel's RMSNorm and softmax forward on the problems' tuning shapes, for the Triton comparison table
(bench/triton/compare.py). Inputs rotate over enough copies to exceed L2 (as the harness keeps caches cold), each
time is the median of CUDA-event timings of one call, after warm-up. Prints one JSON object.

    python3 bench/triton/liger_times.py > liger.json
"""
import json
import sys
import traceback

import torch
from liger_kernel.ops.rms_norm import rms_norm_forward
from liger_kernel.ops.softmax import _softmax_forward

RMSNORM = [(16, 8192), (256, 8192), (4096, 8192), (16384, 8192), (65536, 4096)]
SOFTMAX = [(32, 32768), (4096, 32768), (32768, 4096), (1024, 131072)]
L2_BYTES = 60 << 20


def timed(make_inputs, call, bytes_per_call, reps=200):
    copies = max(2, min(64, 4 * L2_BYTES // max(1, bytes_per_call) + 1))
    sets = [make_inputs() for _ in range(copies)]
    for i in range(10):
        call(*sets[i % copies])
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s = sets[i % copies]
        a.record()
        call(*s)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    torch.manual_seed(0)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rmsnorm": {}, "softmax": {}}
    import liger_kernel, triton
    out["triton"] = triton.__version__
    out["liger_kernel"] = getattr(liger_kernel, "__version__", "0.8.5")
    for t, h in RMSNORM:
        try:
            w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
            us = timed(lambda: (torch.randn(t, h, device="cuda", dtype=torch.bfloat16), ),
                       lambda x: rms_norm_forward(x, w, 1e-6, 0.0, "llama", None), 4 * t * h)
            out["rmsnorm"][f"T={t},H={h}"] = us
        except Exception:
            out.setdefault("errors", []).append(traceback.format_exc()[-1500:])
    for r, c in SOFTMAX:
        try:
            us = timed(lambda: (4 * torch.randn(r, c, device="cuda", dtype=torch.float16), ),
                       lambda x: _softmax_forward(x), 4 * r * c)
            out["softmax"][f"R={r},C={c}"] = us
        except Exception:
            out.setdefault("errors", []).append(traceback.format_exc()[-1500:])
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
