# A cheat for the GPU check: rows past 4096 are never written (a clamp the token rules cannot tell from a tile
# bound). The harness poisons outputs before every launch, so the rows it skips are wrong at T > 4096.
import triton
import triton.language as tl

# @kl:param BLOCK = 16384 in [16384]
# @kl:launch rms grid=(T) num_warps=16 num_stages=1 args=(y, x, w, T, H, eps)


@triton.jit
def rms(y, x, w, T, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    if row >= 4096:
        return
    cols = tl.arange(0, BLOCK)
    m = cols < H
    v = tl.load(x + row * H + cols, mask=m, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(v * v, axis=0) / H + eps)
    g = tl.load(w + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y + row * H + cols, (v * inv * g).to(y.dtype.element_ty), mask=m)
