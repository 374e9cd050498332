# Tunable RMSNorm in Triton: one program per row. A row of at most BLOCK elements is read once into registers,
# reduced and written; a longer row is reduced in BLOCK chunks and read again (from L2) to write. H is a multiple
# of 8 (problem.json), so rows start 16-byte aligned and loads vectorize.
import triton
import triton.language as tl

# @kl:param BLOCK = 8192 in [1024, 2048, 4096, 8192, 16384]
# @kl:param WARPS = 8 in [2, 4, 8, 16, 32]
# @kl:param STAGES = 2 in [1, 2, 3]
# @kl:constraint BLOCK >= 32 * WARPS
# @kl:launch rmsnorm_triton grid=(T) num_warps=WARPS num_stages=STAGES args=(y, x, w, T, H, eps)


@triton.jit
def rmsnorm_triton(y, x, w, T, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = tl.multiple_of(row * H, 8)
    cols = tl.arange(0, BLOCK)
    if H <= BLOCK:
        m = cols < H
        v = tl.load(x + base + cols, mask=m, other=0.0).to(tl.float32)
        inv = tl.rsqrt(tl.sum(v * v, axis=0) / H + eps)
        g = tl.load(w + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(y + base + cols, (v * inv * g).to(y.dtype.element_ty), mask=m)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, H, BLOCK):
            c = start + cols
            v = tl.load(x + base + c, mask=c < H, other=0.0).to(tl.float32)
            acc += v * v
        inv = tl.rsqrt(tl.sum(acc, axis=0) / H + eps)
        for start in range(0, H, BLOCK):
            c = start + cols
            m = c < H
            v = tl.load(x + base + c, mask=m, other=0.0).to(tl.float32)
            g = tl.load(w + c, mask=m, other=0.0).to(tl.float32)
            tl.store(y + base + c, (v * inv * g).to(y.dtype.element_ty), mask=m)
