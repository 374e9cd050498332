// GPU tests (label gpu): in-process CUPTI capture, the range profiler, and `kloop profile` on a test program.
#include "profiler/analysis.h"
#include "profiler/cupti/capture.h"
#include "profiler/importers.h"

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <string>

using namespace kl::prof;

namespace {

__global__ void g_copy(const float4* __restrict__ a, float4* __restrict__ b, size_t n)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        b[i] = a[i];
}

__global__ void g_fma(float* out, int iters)
{
    float x = threadIdx.x, y = 1.0001f, z = 0.5f;
    for (int i = 0; i < iters; ++i) {
        x = fmaf(x, y, z);
        z = fmaf(z, y, x);
    }
    if (x + z == 12345.f)
        *out = x;
}

__global__ void g_tiny(float* p)
{
    p[threadIdx.x] += 1.f;
}

bool haveGpu()
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct Buffers {
    size_t n = size_t(32) << 20;
    float4* a = nullptr;
    float4* b = nullptr;
    float* s = nullptr;
    Buffers()
    {
        cudaMalloc(&a, n * sizeof(float4));
        cudaMalloc(&b, n * sizeof(float4));
        cudaMalloc(&s, 4096);
        cudaMemset(a, 0, n * sizeof(float4));
        cudaDeviceSynchronize();
    }
    ~Buffers()
    {
        cudaFree(a);
        cudaFree(b);
        cudaFree(s);
    }
};

} // namespace

TEST(CuptiCaptureGpu, InProcessCaptureRecordsKernelsCopiesAndLinks)
{
    if (!haveGpu())
        GTEST_SKIP() << "no CUDA device";
    Buffers buf;
    CuptiCapture cap;
    cap.start();
    g_copy<<<132 * 8, 256>>>(buf.a, buf.b, buf.n);
    for (int i = 0; i < 100; ++i)
        g_tiny<<<1, 32>>>(buf.s);
    float host[16] = {};
    cudaMemcpy(host, buf.s, sizeof(host), cudaMemcpyDeviceToHost);
    cudaDeviceSynchronize();
    Trace t = cap.stop();
    size_t copies = 0, tiny = 0, memcpys = 0, linked = 0;
    for (uint32_t i = 0; i < t.eventCount(); ++i) {
        const Event& e = t.event(i);
        if (e.kind == EventKind::Kernel) {
            std::string n(t.name(e));
            copies += n.find("g_copy") != std::string::npos;
            tiny += n.find("g_tiny") != std::string::npos;
            linked += t.launchOf(i) != kNone;
            if (n.find("g_copy") != std::string::npos) {
                EXPECT_EQ(t.kernelInfo(e)->grid[0], 132u * 8);
                EXPECT_EQ(t.kernelInfo(e)->block[0], 256u);
                EXPECT_GT(e.duration(), 1000);
            }
        }
        memcpys += e.kind == EventKind::Memcpy;
    }
    EXPECT_EQ(copies, 1u);
    EXPECT_EQ(tiny, 100u);
    EXPECT_EQ(linked, 101u);
    EXPECT_GE(memcpys, 1u);
    Analysis a = analyze(t);
    std::printf("%s", toText(a).c_str());
}

TEST(CuptiCaptureGpu, SpeedOfLightSeparatesCopyFromFma)
{
    if (!haveGpu())
        GTEST_SKIP() << "no CUDA device";
    Buffers buf;
    const cupti::RangeProfile r = cupti::profileKernels([&] {
        g_copy<<<132 * 16, 256>>>(buf.a, buf.b, buf.n);
        g_fma<<<132 * 8, 256>>>(buf.s, 1 << 14);
    });
    if (!r.available)
        GTEST_SKIP() << "counters unavailable: " << r.unavailableReason;
    ASSERT_EQ(r.kernels.size(), 2u);
    std::printf("SOL copy: dram %.1f%% sm %.1f%% occ %.1f%% dur %.0f ns bytes %.3g; fma: dram %.1f%% sm %.1f%%; "
                "passes %zu\n",
        r.kernels[0].dramThroughputPct, r.kernels[0].smThroughputPct, r.kernels[0].achievedOccupancyPct,
        r.kernels[0].durationNs, r.kernels[0].dramBytes, r.kernels[1].dramThroughputPct, r.kernels[1].smThroughputPct,
        r.passes);
    EXPECT_GT(r.kernels[0].dramThroughputPct, 50);
    EXPECT_LT(r.kernels[0].smThroughputPct, 40);
    EXPECT_GT(r.kernels[1].smThroughputPct, 50);
    EXPECT_LT(r.kernels[1].dramThroughputPct, 10);
    EXPECT_NEAR(r.kernels[0].dramBytes, 2.0 * buf.n * sizeof(float4), 0.1 * buf.n * sizeof(float4));
}

TEST(CuptiCaptureGpu, KloopProfileTracesTheTestProgram)
{
    if (!haveGpu())
        GTEST_SKIP() << "no CUDA device";
    std::string out = ::testing::TempDir() + "testprog.kltrace";
    std::string cmd = std::string(KL_KLOOP) + " profile --quiet --out " + out + " -- " + KL_TRACE_TESTPROG;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    Trace t = importTraceFile(out);
    size_t kernels = 0, ranges = 0, marks = 0, memcpys = 0;
    for (const auto& e : t.events()) {
        kernels += e.kind == EventKind::Kernel;
        ranges += e.kind == EventKind::NvtxRange;
        marks += e.kind == EventKind::NvtxMark;
        memcpys += e.kind == EventKind::Memcpy;
    }
    EXPECT_EQ(kernels, 3u + 1u + 2000u + 50u);
    EXPECT_EQ(ranges, 5u);
    EXPECT_EQ(marks, 1u);
    EXPECT_GE(memcpys, 2u);
    Analysis a = analyze(t);
    ASSERT_FALSE(a.launchPhases.empty());
    EXPECT_EQ(a.launchPhases[0].label, "launch-bound phase");
    EXPECT_GE(a.launchPhases[0].kernels, 1000u);
    std::printf("%s", toText(a).c_str());
}
