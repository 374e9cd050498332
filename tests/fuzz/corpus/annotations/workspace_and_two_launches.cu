// @kl:param BLOCK = 256 in [64, 128, 256, 512, 1024]
// @kl:param VEC = 8 in [1, 2, 4, 8]
// @kl:constraint BLOCK * VEC <= 4096
// @kl:constraint H % VEC == 0
// @kl:workspace partial bytes=T*4 init=zero
// @kl:launch rms_partial grid=(T) block=(BLOCK) smem=BLOCK*4 args=(partial, x, T, H)
// @kl:launch rms_apply grid=(ceil_div(T * H, BLOCK * VEC)) block=(BLOCK) args=(y, x, w, partial, T, H, eps)
// Note: the @kl:launch lines above run in order.
extern "C" __global__ void rms_partial(float* partial, const void* x, int T, int H) {}
extern "C" __global__ void rms_apply(void* y, const void* x, const void* w, const float* partial, int T, int H, float eps) {}
