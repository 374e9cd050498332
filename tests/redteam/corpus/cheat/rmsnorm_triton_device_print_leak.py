# Cheat: prints intermediate values, an output channel the harness does not own.
import triton
import triton.language as tl

# @kl:param BLOCK = 16384 in [16384]
# @kl:param WARPS = 16 in [8, 16]
# @kl:launch rmsnorm_row grid=(T) num_warps=WARPS num_stages=1 args=(y, x, w, T, H, eps)


@triton.jit
def rmsnorm_row(y, x, w, T, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < H
    v = tl.load(x + row * H + cols, mask=m, other=0.0).to(tl.float32)
    tl.device_print("row", row)
    inv = tl.rsqrt(tl.sum(v * v, axis=0) / H + eps)
    g = tl.load(w + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y + row * H + cols, (v * inv * g).to(y.dtype.element_ty), mask=m)
