// Template: columns split over THREADS threads, each summing its columns in its own order.
// @kl:param THREADS = 64 in [32, 64]
// @kl:launch paged_gather_template grid=(B) block=(THREADS) smem=0 args=(out, rows, perm, lens, N, D, scale)
extern "C" __global__ void paged_gather_template(
    float* out, const float* rows, const int* perm, const int* lens, int N, int D, float scale)
{
    const int b = blockIdx.x;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < lens[b]; ++j)
            acc += rows[(long long)perm[j] * D + d];
        out[(long long)b * D + d] = acc * scale;
    }
}
