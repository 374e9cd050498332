// Trusted reference: one block per b, one thread per column d, math in KL_ACC.
#ifndef KL_ACC
#define KL_ACC float
#endif
// @kl:launch paged_gather_reference grid=(B) block=(D) smem=0 args=(out, rows, perm, lens, B, N, D, scale)
extern "C" __global__ void paged_gather_reference(float* out, const float* rows, const int* perm, const int* lens,
    int B, int N, int D, float scale)
{
    const int b = blockIdx.x;
    const int d = threadIdx.x;
    KL_ACC acc = 0;
    for (int j = 0; j < lens[b]; ++j)
        acc += (KL_ACC)rows[(long long)perm[j] * D + d];
    out[(long long)b * D + d] = (float)(acc * (KL_ACC)scale);
}
