#!/usr/bin/env bash
# Compile-checks the instruction-availability claims in context/hardware/ with the local ptxas:
# for each snippet and target, "ok" means ptxas accepts it (not that it is fast there).
# Usage: context/tools/check-isa.sh [nvcc]   (needs no GPU)
set -u
NVCC=${1:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/wgmma.cu" <<'CU'
__global__ void k() { asm volatile("wgmma.fence.sync.aligned;\n"); }
CU
cat > "$dir/setmaxnreg.cu" <<'CU'
__global__ void k() { asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n"); }
CU
cat > "$dir/tcgen05.cu" <<'CU'
__global__ void k() { __shared__ unsigned int slot; unsigned int a = (unsigned int)__cvta_generic_to_shared(&slot);
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;\n" :: "r"(a)); }
CU
cat > "$dir/bulk.cu" <<'CU'
__global__ void k(const int4* g) { __shared__ __align__(128) int4 s[8]; __shared__ __align__(8) unsigned long long bar;
  unsigned int sa = (unsigned int)__cvta_generic_to_shared(s); unsigned int ba = (unsigned int)__cvta_generic_to_shared(&bar);
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 128, [%2];\n" :: "r"(sa), "l"(g), "r"(ba) : "memory"); }
CU
cat > "$dir/multicast.cu" <<'CU'
__global__ void k(const int4* g) { __shared__ __align__(128) int4 s[8]; __shared__ __align__(8) unsigned long long bar;
  unsigned int sa = (unsigned int)__cvta_generic_to_shared(s); unsigned int ba = (unsigned int)__cvta_generic_to_shared(&bar);
  unsigned short m = 3;
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], 128, [%2], %3;\n" :: "r"(sa), "l"(g), "r"(ba), "h"(m) : "memory"); }
CU
cat > "$dir/cpasync.cu" <<'CU'
__global__ void k(const int4* g) { __shared__ int4 s[8]; unsigned int sa = (unsigned int)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n cp.async.commit_group;\n cp.async.wait_group 0;\n" :: "r"(sa), "l"(g) : "memory"); }
CU
cat > "$dir/cluster.cu" <<'CU'
__global__ void __cluster_dims__(2,1,1) k(int* o) { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); o[blockIdx.x] = r; }
CU
cat > "$dir/fp8mma.cu" <<'CU'
__global__ void k(float* d) { unsigned a[4]={0,0,0,0}, b[2]={0,0}; float c[4]={0,0,0,0};
 asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
 : "+f"(c[0]),"+f"(c[1]),"+f"(c[2]),"+f"(c[3]) : "r"(a[0]),"r"(a[1]),"r"(a[2]),"r"(a[3]),"r"(b[0]),"r"(b[1])); d[threadIdx.x]=c[0]; }
CU
cat > "$dir/ldmatrix.cu" <<'CU'
__global__ void k(unsigned* o) { __shared__ unsigned s[128]; unsigned sa = (unsigned)__cvta_generic_to_shared(s + threadIdx.x % 32 * 4), r;
 asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r) : "r"(sa)); o[threadIdx.x] = r; }
CU
cat > "$dir/f16mma.cu" <<'CU'
__global__ void k(float* d) { unsigned a[2]={0,0}, b=0; float c[4]={0,0,0,0};
 asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
 : "+f"(c[0]),"+f"(c[1]),"+f"(c[2]),"+f"(c[3]) : "r"(a[0]),"r"(a[1]),"r"(b)); d[threadIdx.x]=c[0]; }
CU
cat > "$dir/bf16mma.cu" <<'CU'
__global__ void k(float* d) { unsigned a[4]={0,0,0,0}, b[2]={0,0}; float c[4]={0,0,0,0};
 asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
 : "+f"(c[0]),"+f"(c[1]),"+f"(c[2]),"+f"(c[3]) : "r"(a[0]),"r"(a[1]),"r"(a[2]),"r"(a[3]),"r"(b[0]),"r"(b[1])); d[threadIdx.x]=c[0]; }
CU
archs="sm_75 sm_80 sm_86 sm_89 sm_90 sm_90a sm_100a sm_120 sm_120a"
"$NVCC" --version | tail -1
printf "%-11s" ""; for a in $archs; do printf " %-8s" $a; done; echo
for f in ldmatrix f16mma bf16mma cpasync bulk multicast cluster fp8mma wgmma setmaxnreg tcgen05; do
  printf "%-11s" $f
  for a in $archs; do
    if "$NVCC" -arch=$a -cubin -o /dev/null "$dir/$f.cu" 2>/dev/null; then r=ok; else r=no; fi
    printf " %-8s" $r
  done
  echo
done
