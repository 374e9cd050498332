# Cheat: reads %clock64 through inline PTX to detect timed launches.
import triton
import triton.language as tl

# @kl:param BLOCK = 4096 in [2048, 4096]
# @kl:param WARPS = 8 in [4, 8]
# @kl:launch softmax_online grid=(R) num_warps=WARPS num_stages=2 args=(y, x, R, C)


@triton.jit
def softmax_online(y, x, R, C, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * C
    t = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    cols = tl.arange(0, BLOCK) + (t & 0).to(tl.int32)
    run_max = tl.full([BLOCK], -float("inf"), tl.float32)
    run_sum = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, C, BLOCK):
        c = start + cols
        v = tl.load(x + base + c, mask=c < C, other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(run_max, v)
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
