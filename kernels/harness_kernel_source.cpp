// The harness's own device kernels as NVRTC source. Kept apart from the worker's driver-API code so the
// GPU-less test suite can compile it too.
#include "kernels/harness_kernel_source.h"

namespace kl {

const std::string& harnessKernelSource()
{
    static const std::string src = R"CUDA(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
typedef unsigned long long u64;
typedef unsigned int u32;
// dtype codes follow kl::DType: F32 F16 BF16 F64 I32 I64 U8 FP8E4M3.
// Every pass over a tensor moves 16 bytes per thread and iteration: these kernels run several times per
// verification check over gigabyte tensors, so their bandwidth decides how many candidates a minute we can judge.
__device__ __forceinline__ u64 kl_mix(u64 z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ u32 kl_mix32(u32 h) {
  h ^= h >> 16; h *= 0x7feb352du;
  h ^= h >> 15; h *= 0x846ca68bu;
  return h ^ (h >> 16);
}
template <int DT> struct KlT;
// Vector lanes hold raw bits (the 16-bit and 8-bit float types are not trivially constructible, so they cannot sit
// in a union); these convert.
template <typename S, typename B> __device__ __forceinline__ S kl_from_bits(B b) { S s; memcpy(&s, &b, sizeof(S)); return s; }
template <typename S, typename B> __device__ __forceinline__ B kl_to_bits(S s) { B b; memcpy(&b, &s, sizeof(B)); return b; }
// C: the arithmetic type of comparisons, float where it holds every value of S exactly.
template <> struct KlT<0> { typedef float S; typedef u32 B; typedef float C;
  static __device__ double val(S v) { return v; }
  static __device__ S make(float v) { return v; } };
template <> struct KlT<1> { typedef __half S; typedef unsigned short B; typedef float C;
  static __device__ double val(S v) { return __half2float(v); }
  static __device__ S make(float v) { return __float2half_rn(fminf(fmaxf(v, -60000.f), 60000.f)); } };
template <> struct KlT<2> { typedef __nv_bfloat16 S; typedef unsigned short B; typedef float C;
  static __device__ double val(S v) { return __bfloat162float(v); }
  static __device__ S make(float v) { return __float2bfloat16_rn(v); } };
template <> struct KlT<3> { typedef double S; typedef u64 B; typedef double C;
  static __device__ double val(S v) { return v; }
  static __device__ S make(float v) { return v; } };
template <> struct KlT<4> { typedef int S; typedef u32 B; typedef double C;
  static __device__ double val(S v) { return v; }
  static __device__ S make(float v) { return (int)rintf(v); } };
template <> struct KlT<5> { typedef long long S; typedef u64 B; typedef double C;
  static __device__ double val(S v) { return (double)v; }
  static __device__ S make(float v) { return (long long)rintf(v); } };
template <> struct KlT<6> { typedef unsigned char S; typedef unsigned char B; typedef float C;
  static __device__ double val(S v) { return v; }
  static __device__ S make(float v) { return (unsigned char)fminf(fmaxf(rintf(v), 0.f), 255.f); } };
template <> struct KlT<7> { typedef __nv_fp8_e4m3 S; typedef unsigned char B; typedef float C;
  static __device__ double val(S v) { return (float)v; }
  static __device__ S make(float v) { return __nv_fp8_e4m3(fminf(fmaxf(v, -448.f), 448.f)); } };

// The vector part covers whole 16-byte chunks of a 16-byte-aligned buffer; the scalar tail the rest (or all of
// an unaligned buffer).
struct KlRange { u64 chunks; u64 tailBegin; };
template <typename S> __device__ __forceinline__ KlRange kl_range(const void* p, u64 n) {
  const u64 per = 16 / sizeof(S);
  KlRange r;
  r.chunks = ((unsigned long long)p & 15) ? 0 : n / per;
  r.tailBegin = r.chunks * per;
  return r;
}
__device__ __forceinline__ u64 kl_tid() { return blockIdx.x * (u64)blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 kl_stride() { return (u64)gridDim.x * blockDim.x; }

// Counter-based, roughly normal values without transcendentals (filling gigabytes per check must stay
// memory-bound): one 32-bit hash per 16-byte chunk seeds an xorshift stream, and each element is the centred sum of
// the four bytes of one step (Irwin-Hall, sd 147.8, range +-3.45 sd). A value depends only on the seed and the
// element's index, never on the launch geometry.
struct KlGen {
  u32 x;
  int dist;
  float large;
  __device__ __forceinline__ KlGen(u64 chunk, u32 s0, u32 s1, int d, float l) : dist(d), large(l) {
    x = kl_mix32((u32)chunk * 0x9E3779B9u ^ s0 ^ kl_mix32((u32)(chunk >> 32) + s1)) | 1u;
  }
  __device__ __forceinline__ u32 step() { x ^= x << 13; x ^= x >> 17; x ^= x << 5; return x; }
  __device__ __forceinline__ float next() {
    const u32 r = step();
    float g = (float)((int)(r & 255u) + (int)((r >> 8) & 255u) + (int)((r >> 16) & 255u) + (int)(r >> 24) - 510) *
              (1.0f / 147.8f);
    if (dist == 1) g *= large;
    else if (dist == 2 && (kl_mix32(r) & 1023u) == 0) g *= 64.0f;
    return g;
  }
};
template <int DT> __device__ void kl_fill_t(void* p, u64 n, int dist, u64 seed, float scale, float large) {
  typedef typename KlT<DT>::S S;
  typedef typename KlT<DT>::B B;
  const u32 s0 = (u32)seed, s1 = (u32)(seed >> 32);
  const int per = 16 / sizeof(S);
  const KlRange r = kl_range<S>(p, n);
  for (u64 c = kl_tid(); c < r.chunks; c += kl_stride()) {
    union { uint4 v; B b[16 / sizeof(B)]; } u;
    KlGen gen(c, s0, s1, dist, large);
#pragma unroll
    for (int k = 0; k < per; ++k) u.b[k] = kl_to_bits<S, B>(KlT<DT>::make(gen.next() * scale));
    ((uint4*)p)[c] = u.v;
  }
  for (u64 i = r.tailBegin + kl_tid(); i < n; i += kl_stride()) {
    KlGen gen(i / per, s0, s1, dist, large);
    float g = 0;
    for (u64 k = 0; k <= i % per; ++k) g = gen.next();
    ((S*)p)[i] = KlT<DT>::make(g * scale);
  }
}
template <int DT> __device__ void kl_poison_t(void* p, u64 n, u64 pattern) {
  typedef typename KlT<DT>::S S;
  typedef typename KlT<DT>::B B;
  const KlRange r = kl_range<S>(p, n);
  union { uint4 v; B b[16 / sizeof(B)]; } u;
#pragma unroll
  for (int k = 0; k < 16 / (int)sizeof(B); ++k) u.b[k] = (B)pattern;
  for (u64 c = kl_tid(); c < r.chunks; c += kl_stride()) ((uint4*)p)[c] = u.v;
  for (u64 i = r.tailBegin + kl_tid(); i < n; i += kl_stride()) ((B*)p)[i] = (B)pattern;
}

struct KlCmp { double sd, sr; u64 nonfinite, poisoned; float mx; };
template <int DT> __device__ __forceinline__ void kl_cmp_one(typename KlT<DT>::B cb, typename KlT<DT>::B rb,
                                                            typename KlT<DT>::B poison, double floorv, KlCmp& a) {
  typedef typename KlT<DT>::S S;
  typedef typename KlT<DT>::B B;
  typedef typename KlT<DT>::C C;
  // Integer and 8-bit poison patterns are ordinary values: an element the reference also has there is right either way.
  if (cb == poison) { if (rb != poison) ++a.poisoned; return; }
  const C r = (C)KlT<DT>::val(kl_from_bits<S, B>(rb)), c = (C)KlT<DT>::val(kl_from_bits<S, B>(cb));
  const bool rf = isfinite(r), cf = isfinite(c);
  if (rf && !cf) { ++a.nonfinite; return; }
  if (!rf) {
    if (!((isnan(r) && isnan(c)) || r == c)) ++a.nonfinite;
    return;
  }
  const C d = c - r;
  a.sd += (double)d * d;
  a.sr += (double)r * r;
  // An approximate quotient is plenty for comparing with a tolerance, and a full division costs more than the load;
  // but __fdividef returns 0 for divisors above 2^126, and doubles do not fit a float.
  const C den = fmax(fabs(r), (C)floorv);
  const float q = (sizeof(C) == 4 && den < (C)1e37f) ? __fdividef((float)fabs(d), (float)den) : (float)(fabs(d) / den);
  a.mx = fmaxf(a.mx, q);
}
// One pass: squared error and reference sums for the relative L2 error, poison left (coverage), non-finite
// mismatches, and the max scaled error |c - r| / max(|r|, rms(ref), 1). rms(ref) comes from kl_h_sum_squares,
// run on the reference output before, so cancellation to near zero in a long reduction is judged against the
// output's typical magnitude.
template <int DT> __device__ void kl_compare_t(const void* cand, const void* ref, u64 n, u64 poison, u64* slots,
                                               const u64* refSumSq, u64 rmsCount) {
  typedef typename KlT<DT>::S S;
  typedef typename KlT<DT>::B B;
  const double rms = sqrt(__longlong_as_double((long long)*refSumSq) / (double)(rmsCount ? rmsCount : 1));
  const double floorv = fmax(rms, 1.0);
  KlCmp a = {0, 0, 0, 0, 0.f};
  const int per = 16 / sizeof(S);
  const KlRange rc = kl_range<S>(cand, n), rr = kl_range<S>(ref, n);
  const u64 chunks = rc.chunks < rr.chunks ? rc.chunks : rr.chunks;
  const u64 tail = chunks * per;
  for (u64 c = kl_tid(); c < chunks; c += kl_stride()) {
    union { uint4 v; B b[16 / sizeof(B)]; } uc, ur;
    uc.v = ((const uint4*)cand)[c];
    ur.v = ((const uint4*)ref)[c];
#pragma unroll
    for (int k = 0; k < per; ++k) kl_cmp_one<DT>(uc.b[k], ur.b[k], (B)poison, floorv, a);
  }
  for (u64 i = tail + kl_tid(); i < n; i += kl_stride())
    kl_cmp_one<DT>(((const B*)cand)[i], ((const B*)ref)[i], (B)poison, floorv, a);
  for (int o = 16; o > 0; o >>= 1) {
    a.sd += __shfl_xor_sync(0xffffffffu, a.sd, o);
    a.sr += __shfl_xor_sync(0xffffffffu, a.sr, o);
    a.nonfinite += __shfl_xor_sync(0xffffffffu, a.nonfinite, o);
    a.poisoned += __shfl_xor_sync(0xffffffffu, a.poisoned, o);
    a.mx = fmaxf(a.mx, __shfl_xor_sync(0xffffffffu, a.mx, o));
  }
  if ((threadIdx.x & 31) == 0) {
    if (a.sd != 0) atomicAdd((double*)&slots[0], a.sd);
    if (a.sr != 0) atomicAdd((double*)&slots[1], a.sr);
    if (a.mx > 0) atomicMax((u32*)&slots[2], __float_as_uint(a.mx));
    if (a.nonfinite) atomicAdd(&slots[3], a.nonfinite);
    if (a.poisoned) atomicAdd(&slots[4], a.poisoned);
  }
}
template <int DT> __device__ void kl_sum_squares_t(const void* ref, u64 n, u64* out) {
  typedef typename KlT<DT>::S S;
  typedef typename KlT<DT>::B B;
  double acc = 0;
  const int per = 16 / sizeof(S);
  const KlRange r = kl_range<S>(ref, n);
  for (u64 c = kl_tid(); c < r.chunks; c += kl_stride()) {
    union { uint4 v; B b[16 / sizeof(B)]; } u;
    u.v = ((const uint4*)ref)[c];
#pragma unroll
    for (int k = 0; k < per; ++k) {
      const double v = KlT<DT>::val(kl_from_bits<S, B>(u.b[k]));
      if (isfinite(v)) acc += v * v;
    }
  }
  for (u64 i = r.tailBegin + kl_tid(); i < n; i += kl_stride()) {
    const double v = KlT<DT>::val(((const S*)ref)[i]);
    if (isfinite(v)) acc += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0 && acc != 0) atomicAdd((double*)out, acc);
}

#define KL_DISPATCH(CALL) switch (dt) { \
  case 0: CALL(0); break; case 1: CALL(1); break; case 2: CALL(2); break; case 3: CALL(3); break; \
  case 4: CALL(4); break; case 5: CALL(5); break; case 6: CALL(6); break; case 7: CALL(7); break; }

extern "C" __global__ void kl_h_fill(void* p, u64 n, int dt, int dist, u64 seed, float scale, float large) {
#define KL_CALL(D) kl_fill_t<D>(p, n, dist, seed, scale, large)
  KL_DISPATCH(KL_CALL)
#undef KL_CALL
}
extern "C" __global__ void kl_h_poison(void* p, u64 n, int dt, u64 pattern) {
#define KL_CALL(D) kl_poison_t<D>(p, n, pattern)
  KL_DISPATCH(KL_CALL)
#undef KL_CALL
}
extern "C" __global__ void kl_h_compare(const void* cand, const void* ref, u64 n, int dt, u64 poison, u64* slots,
                                        const u64* refSumSq) {
#define KL_CALL(D) kl_compare_t<D>(cand, ref, n, poison, slots, refSumSq, n)
  KL_DISPATCH(KL_CALL)
#undef KL_CALL
}
// Many (candidate, reference) buffer pairs of one output, pooled into one set of slots: pair blockIdx.y. The
// pointer lists live in the harness's own memory, like everything this kernel reads but the candidate copy.
extern "C" __global__ void kl_h_compare_pairs(const u64* candPtrs, const u64* refPtrs, u64 n, int dt, u64 poison,
                                              u64* slots, const u64* refSumSq, u64 rmsCount) {
  const void* cand = (const void*)candPtrs[blockIdx.y];
  const void* ref = (const void*)refPtrs[blockIdx.y];
#define KL_CALL(D) kl_compare_t<D>(cand, ref, n, poison, slots, refSumSq, rmsCount)
  KL_DISPATCH(KL_CALL)
#undef KL_CALL
}
// A slab (kl::SlabLayout): one tensor's buffers of all sets in one mapping. Set k's buffer starts at
// lead + k * stride + gap[k] * 256 + pre; every other word of the mapping is a canary.
#define KL_MAX_SLAB_SETS 2048
struct KlSlab {
  unsigned char* base;
  u64 stride, lead, pre, bufBytes;
  u32 sets;
  unsigned char gap[KL_MAX_SLAB_SETS];
};
__device__ __forceinline__ u64 kl_slab_offset(const KlSlab& s, u32 k) { return s.lead + k * s.stride + s.gap[k] * 256ull + s.pre; }
__device__ __forceinline__ u32 kl_canary_word(u32 pattern, u64 w) { return pattern ^ (u32)(w * 2654435761ull) ^ (u32)(w >> 32); }
// Canary words of the slab: blockIdx.y = k covers set k's stride outside its buffer, y = sets the lead.
template <bool CHECK> __device__ u64 kl_slab_canaries(const KlSlab& s, u32 pattern) {
  const u32 k = blockIdx.y;
  // Words [begin, end) of this part minus the buffer's words [skipBegin, skipEnd): two spans, one index.
  u64 begin = 0, end = s.lead / 4, skipBegin = end, skipEnd = end;
  if (k < s.sets) {
    begin = (s.lead + k * s.stride) / 4;
    end = begin + s.stride / 4;
    skipBegin = kl_slab_offset(s, k) / 4;
    skipEnd = (kl_slab_offset(s, k) + s.bufBytes + 3) / 4;
  }
  const u64 first = skipBegin - begin, total = first + (end - skipEnd);
  u32* w = (u32*)s.base;
  u64 bad = 0;
  for (u64 j = kl_tid(); j < total; j += kl_stride()) {
    const u64 i = j < first ? begin + j : skipEnd + (j - first);
    if (CHECK) bad += w[i] != kl_canary_word(pattern, i);
    else w[i] = kl_canary_word(pattern, i);
  }
  return bad;
}
extern "C" __global__ void kl_h_slab_canary_fill(KlSlab s, u32 pattern) { kl_slab_canaries<false>(s, pattern); }
extern "C" __global__ void kl_h_slab_canary_check(KlSlab s, u32 pattern, u64* slot) {
  u64 bad = kl_slab_canaries<true>(s, pattern);
  for (int o = 16; o > 0; o >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, o);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(slot, bad);
}
// Per-set buffers of a slab: poison each, or fill each from (seed, set) so the values do not depend on the layout.
extern "C" __global__ void kl_h_slab_poison(KlSlab s, u64 n, int dt, u64 pattern) {
  if (blockIdx.y >= s.sets) return;
  void* p = s.base + kl_slab_offset(s, blockIdx.y);
#define KL_CALL(D) kl_poison_t<D>(p, n, pattern)
  KL_DISPATCH(KL_CALL)
#undef KL_CALL
}
extern "C" __global__ void kl_h_slab_fill(KlSlab s, u64 n, int dt, int dist, u64 seed, float scale, float large) {
  if (blockIdx.y >= s.sets) return;
  void* p = s.base + kl_slab_offset(s, blockIdx.y);
  const u64 setSeed = seed ^ kl_mix(0x5E75EEDull + blockIdx.y);
#define KL_CALL(D) kl_fill_t<D>(p, n, dist, setSeed, scale, large)
  KL_DISPATCH(KL_CALL)
#undef KL_CALL
}
extern "C" __global__ void kl_h_sum_squares(const void* ref, u64 n, int dt, u64* out) {
#define KL_CALL(D) kl_sum_squares_t<D>(ref, n, out)
  KL_DISPATCH(KL_CALL)
#undef KL_CALL
}
// Sum of a bijective 32-bit mix of (word + position): any changed word changes its term.
__device__ __forceinline__ u64 kl_hash_word(u32 w, u64 i, u32 s32) {
  return kl_mix32(w + (u32)i * 0x9E3779B9u + s32) + ((u64)(u32)(i >> 32) << 32);
}
extern "C" __global__ void kl_h_hash(const unsigned char* p, u64 bytes, u64 salt, u64* slot) {
  const u64 words = bytes / 4;
  const u32 s32 = (u32)salt ^ (u32)(salt >> 32);
  const u64 chunks = ((unsigned long long)p & 15) ? 0 : words / 4;
  u64 h = 0;
  for (u64 c = kl_tid(); c < chunks; c += kl_stride()) {
    const uint4 v = ((const uint4*)p)[c];
    h += kl_hash_word(v.x, 4 * c, s32) + kl_hash_word(v.y, 4 * c + 1, s32) + kl_hash_word(v.z, 4 * c + 2, s32) +
         kl_hash_word(v.w, 4 * c + 3, s32);
  }
  for (u64 i = chunks * 4 + kl_tid(); i < words; i += kl_stride()) {
    u32 w;
    memcpy(&w, p + 4 * i, 4);
    h += kl_hash_word(w, i, s32);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0)
    for (u64 i = words * 4; i < bytes; ++i) h += kl_mix(salt ^ 0xABCDull ^ (i << 8) ^ p[i]);
  for (int o = 16; o > 0; o >>= 1) h += __shfl_xor_sync(0xffffffffu, h, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(slot, h);
}
extern "C" __global__ void kl_h_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
  // One pass, many blocks, four independent 16-byte loads in flight per thread: the copy ceiling.
  const u64 base = (u64)blockIdx.x * blockDim.x * 4 + threadIdx.x;
  uint4 v[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) if (base + k * blockDim.x < n) v[k] = src[base + k * blockDim.x];
#pragma unroll
  for (int k = 0; k < 4; ++k) if (base + k * blockDim.x < n) dst[base + k * blockDim.x] = v[k];
}
// Many (source, destination) buffer pairs of `bytes` each, pair blockIdx.y: in-place tensors restored from the
// harness's pristine copies before a timed batch. Pointer lists in the harness's own memory.
extern "C" __global__ void kl_h_copy_pairs(const u64* srcPtrs, const u64* dstPtrs, u64 bytes) {
  const unsigned char* src = (const unsigned char*)srcPtrs[blockIdx.y];
  unsigned char* dst = (unsigned char*)dstPtrs[blockIdx.y];
  const u64 chunks = bytes / 16;
  for (u64 c = kl_tid(); c < chunks; c += kl_stride()) ((uint4*)dst)[c] = ((const uint4*)src)[c];
  for (u64 i = chunks * 16 + kl_tid(); i < bytes; i += kl_stride()) dst[i] = src[i];
}
extern "C" __global__ void kl_h_spin(u64 cycles) {
  long long start = clock64();
  while ((u64)(clock64() - start) < cycles) { }
}
)CUDA";
    return src;
}

const std::vector<std::string>& harnessKernelNames()
{
    static const std::vector<std::string> names = { "kl_h_fill", "kl_h_poison", "kl_h_compare", "kl_h_hash",
        "kl_h_copy", "kl_h_spin", "kl_h_sum_squares", "kl_h_compare_pairs", "kl_h_slab_canary_fill",
        "kl_h_slab_canary_check", "kl_h_slab_poison", "kl_h_slab_fill", "kl_h_copy_pairs" };
    return names;
}

} // namespace kl
