# Tunable row softmax in Triton: one program per row, fp32 math. A row of at most BLOCK elements is read once,
# reduced in registers and written; a longer row takes an online pass (running max and rescaled sum per lane over
# BLOCK chunks) and a second read (from L2) to write. C is a multiple of 8 (problem.json): rows start 16-byte aligned.
import triton
import triton.language as tl

# @kl:param BLOCK = 8192 in [1024, 2048, 4096, 8192, 16384, 32768]
# @kl:param WARPS = 8 in [4, 8, 16, 32]
# @kl:param STAGES = 2 in [1, 2, 3]
# @kl:constraint BLOCK >= 32 * WARPS
# @kl:launch softmax_triton grid=(R) num_warps=WARPS num_stages=STAGES args=(y, x, R, C)


@triton.jit
def softmax_triton(y, x, R, C, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = tl.multiple_of(row * C, 8)
    cols = tl.arange(0, BLOCK)
    if C <= BLOCK:
        m = cols < C
        v = tl.load(x + base + cols, mask=m, other=-float("inf")).to(tl.float32)
        e = tl.exp(v - tl.max(v, axis=0))
        tl.store(y + base + cols, (e / tl.sum(e, axis=0)).to(y.dtype.element_ty), mask=m)
    else:
        run_max = tl.full([BLOCK], -float("inf"), tl.float32)
        run_sum = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, C, BLOCK):
            c = start + cols
            v = tl.load(x + base + c, mask=c < C, other=-float("inf")).to(tl.float32)
            new_max = tl.maximum(run_max, v)
            # Lanes that have seen only padding keep max -inf; their sum stays 0 (exp(-inf - -inf) would be NaN).
            scale = tl.where(new_max == -float("inf"), 0.0, tl.exp(run_max - new_max))
            run_sum = run_sum * scale + tl.where(new_max == -float("inf"), 0.0, tl.exp(v - new_max))
            run_max = new_max
        row_max = tl.max(run_max, axis=0)
        total = tl.sum(run_sum * tl.exp(run_max - row_max), axis=0)
        inv = 1.0 / total
        for start in range(0, C, BLOCK):
            c = start + cols
            m = c < C
            v = tl.load(x + base + c, mask=m, other=-float("inf")).to(tl.float32)
            tl.store(y + base + c, (tl.exp(v - row_max) * inv).to(y.dtype.element_ty), mask=m)
