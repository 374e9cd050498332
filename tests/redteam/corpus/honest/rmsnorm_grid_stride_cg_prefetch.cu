// Honest: a grid-stride kernel launched on min(T, 65535) blocks, with namespace-scope extern __shared__
// memory, an L2 prefetch in inline PTX, cooperative_groups::reduce, static_assert and a constexpr template
// helper: everyday constructs the static layers must leave alone.
#include <cuda_bf16.h>
#include <cuda/ptx>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
// @kl:param BLOCK = 256 in [128, 256, 512]
// @kl:launch rmsnorm_kernel grid=(min(T, 65535)) block=(BLOCK) smem=(BLOCK * 4) args=(y, x, w, T, H, eps)
namespace cg = cooperative_groups;
extern __shared__ float dyn_smem[];
static_assert(BLOCK % 32 == 0, "warps");
template <int N>
constexpr int warpsOf() { return N / 32; }
__global__ void __launch_bounds__(BLOCK)
    rmsnorm_kernel(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int T, int H, float eps)
{
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    for (int row = blockIdx.x; row < T; row += gridDim.x) {
        asm volatile("prefetch.global.L2 [%0];" :: "l"(x + (size_t)row * H));
        float ss = 0.f;
        for (int i = threadIdx.x; i < H; i += BLOCK) {
            const float v = __bfloat162float(__ldg(x + (size_t)row * H + i));
            ss += v * v;
        }
        ss = cg::reduce(warp, ss, cg::plus<float>());
        if (warp.thread_rank() == 0) dyn_smem[warp.meta_group_rank()] = ss;
        block.sync();
        float total = 0.f;
        for (int k = 0; k < warpsOf<BLOCK>(); ++k) total += dyn_smem[k];
        const float inv = rsqrtf(total / H + eps);
        for (int i = threadIdx.x; i < H; i += BLOCK)
            y[(size_t)row * H + i]
                = __float2bfloat16(__bfloat162float(x[(size_t)row * H + i]) * inv * __bfloat162float(w[i]));
        block.sync();
    }
}
