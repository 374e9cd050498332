"""The bf16 tensor-core peak the attention tables divide by: cuBLAS on the H200, the best gemm_*_TFLOPs of
/work/shared/measurements/anchors-h200.json (709 TFLOP/s at 4096^3); KL_BF16_TFLOPS overrides it."""
import os

BF16_TFLOPS = float(os.environ.get("KL_BF16_TFLOPS", "709"))


def tflops_text(flops, us):
    """'T (P% of bf16 peak)' for flops done in us microseconds, '-' without a time."""
    if not flops or not us:
        return "-"
    t = flops / (us * 1e-6) / 1e12
    return f"{t:.1f} ({100 * t / BF16_TFLOPS:.0f}%)"
