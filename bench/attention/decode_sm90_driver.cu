// Standalone check of decode_attention's sm_90 template (kernels/problems/decode_attention/template_sm90.cu), for a
// first diagnosis without the harness: built with nvcc and the template's parameters as -D flags (decode-sweep.sh),
// it runs the launch plan as the harness would (the split kernel on min(SM count, 256, tokens / MINTOK) CTAs, the
// merge with programmatic dependent launch when there is more than one CTA; with -DSEQ=n, B x P CTAs in clusters of
// P = min(n, SMs / B) and no merge), compares each shape's output with the problem's reference kernel built in fp64,
// and times the plan at the target shapes. With -DFUSE=1 there is no merge kernel (the sequences' arrival counters
// are zeroed once: the checked run's second launch sees the counters the first left).
//   - Data: fresh values each shape (a hash of the seed and the index, roughly normal), the page table a random
//     permutation, lengths uniform within the last page, as problem.json draws them. Output and workspace poisoned
//     (NaN) before the checked run, so an unwritten element fails.
//   - Judged as the harness judges bf16 (kernels/HARNESS.md, "Measured tolerance"): relative L2 error <= 2^-8, max
//     error |c - r| / max(|r|, rms(r), 1) <= 2^-6, no NaN or Inf.
//   - Timing: CUDA graphs of R plans (split + merge, PDL edges kept), cycling over input sets whose K/V total at least
//     2 x L2 (one set is 270 MB and more at the target shapes), median of 15 replays. The copy bound is the problem's
//     fewest bytes (its "bytes" formula) over the device-to-device copy rate measured here, as attention_peers.py
//     measures it; the read stream is a plain kernel reading the same K/V buffers once (what a read-only stream gets).
// First, on the CPU, the partition of the batch over the CTAs and the merge's reading of it, or with SEQ each
// sequence's shares (--partition-only: only that, no GPU needed). Prints one line per shape and a table last; exit 1
// on any wrong output or CUDA error.
// KL_DRIVER_SHAPE=B,HQ,PS,MAXP checks that one shape only (for a profiler); KL_DRIVER_PAGES=contiguous leaves the page
// table in order (how much of the gap to SDPA is the paging).
#ifndef SEQ
#define SEQ 0 // the template's default: the batch's tokens in equal ranges, a merge kernel
#endif
#ifndef LAZY
#define LAZY 0 // the template's default: O rescaled at every tile
#endif
#ifndef FUSE
#define FUSE 0 // the template's default: a merge kernel combines a split sequence's pieces
#endif
#include "../../kernels/problems/decode_attention/template_sm90.cu"
#define KL_ACC double
#include "../../kernels/problems/decode_attention/reference.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <time.h>
#include <vector>

#define CHECK(x)                                                                                                       \
    do {                                                                                                               \
        const cudaError_t e_ = (x);                                                                                    \
        if (e_ != cudaSuccess) {                                                                                       \
            std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__, #x);        \
            std::exit(2);                                                                                              \
        }                                                                                                              \
    } while (0)

namespace {

constexpr int kHkv = 8;

struct Shape {
    int B, HQ, PS, MAXP;
    bool timed;
};

__global__ void fillBf16(__nv_bfloat16* p, long long n, unsigned seed)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        unsigned h = static_cast<unsigned>(i) * 0x9E3779B1u ^ seed ^ static_cast<unsigned>(i >> 32) * 0x85EBCA77u;
        h ^= h >> 15;
        h *= 0x2C1B3C6Du;
        h ^= h >> 12;
        h *= 0x297A2D39u;
        h ^= h >> 15;
        // The centred sum of four bytes: sd 1, within +-3.45 (the harness's Irwin-Hall fill).
        const float s = ((h & 255u) + ((h >> 8) & 255u) + ((h >> 16) & 255u) + (h >> 24) - 510.f) / 147.8f;
        p[i] = __float2bfloat16_rn(s);
    }
}

__global__ void readStream(const uint4* p, long long n, unsigned* sink)
{
    unsigned x = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const uint4 v = __ldcs(p + i);
        x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (x == 0x12345678u) // never in practice; keeps the loads
        sink[0] = x;
}

// A plan that never finishes (a barrier never completing) ends the run here, naming the shape, instead of at the
// sweep's timeout.
void finishOrExit(cudaStream_t st, const char* what)
{
    for (int waited = 0; waited < 2000; ++waited) {
        const cudaError_t e = cudaStreamQuery(st);
        if (e == cudaSuccess)
            return;
        if (e != cudaErrorNotReady) {
            std::printf("%s: %s\n", what, cudaGetErrorString(e));
            std::exit(2);
        }
        struct timespec ms = { 0, 5000000 };
        nanosleep(&ms, nullptr);
    }
    std::printf("%s: not finished after 10 s (a hang)\n", what);
    std::fflush(stdout);
    std::exit(3);
}

int ceilDiv(long long a, long long b)
{
    return static_cast<int>((a + b - 1) / b);
}

struct Plan {
    int ctas, perSequence; // perSequence: SEQ > 0's cluster, P = min(SEQ, SMs / B), at least 1
    size_t smem, workspace;
    int mergeBlocks;
};

// The launch lines of template_sm90.cu, evaluated for this shape and device.
Plan planFor(const Shape& s, int sms)
{
    Plan p;
    const long long tokens = (long long)s.B * s.MAXP * s.PS;
    p.perSequence = SEQ > 0 ? std::max(1, std::min(SEQ, sms / s.B)) : 1;
    p.ctas = SEQ > 0 ? s.B * p.perSequence : std::min(std::min(sms, 256), ceilDiv(tokens, MINTOK));
    p.smem = (size_t)STAGES * TT * 4128 + 16 * ceilDiv(s.B + 1, 4) + 16 * STAGES + 32;
    p.workspace = 16 * (size_t)(ceilDiv(s.B + 1, 4) + 1)
        + 2 * (size_t)std::min(256, ceilDiv(tokens, MINTOK)) * s.HQ * (kD + 2) * 4;
    int warpsPerHead = 1;
    while (warpsPerHead < 8 && warpsPerHead < ceilDiv(ceilDiv(p.ctas, s.B) + 1, kMergeUnroll))
        warpsPerHead *= 2;
    p.mergeBlocks = SEQ == 0 && FUSE == 0 && p.ctas > 1 ? s.B * s.HQ * warpsPerHead / 8 : 0;
    return p;
}

struct Set {
    __nv_bfloat16 *q, *k, *v;
    int *table, *lens;
};

// FUSE: the sequences' arrival counters, zeroed once (the template's "init=zero"); every launch leaves them at zero.
unsigned* arrivalCounters(cudaStream_t st)
{
    static unsigned* counters = nullptr;
    if (!counters) {
        CHECK(cudaMalloc(&counters, 256 * sizeof(unsigned)));
        CHECK(cudaMemsetAsync(counters, 0, 256 * sizeof(unsigned), st)); // st does not wait for the legacy stream
    }
    return counters;
}

void launchSplit(const Shape& s, const Plan& p, const Set& in, float* ws, __nv_bfloat16* out, cudaStream_t st)
{
    unsigned* arrivals = arrivalCounters(st);
    const float scale = 1.f / std::sqrt(128.f);
    if (p.perSequence > 1) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(p.ctas);
        cfg.blockDim = dim3(kThreads);
        cfg.dynamicSmemBytes = p.smem;
        cfg.stream = st;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = p.perSequence;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        const __nv_bfloat16 *q = in.q, *k = in.k, *v = in.v;
        const int *table = in.table, *lens = in.lens;
        CHECK(cudaLaunchKernelEx(
            &cfg, decode_attention_stream, ws, arrivals, out, q, k, v, table, lens, s.B, s.HQ, s.PS, s.MAXP, scale));
        return;
    }
    decode_attention_stream<<<p.ctas, kThreads, p.smem, st>>>(
        ws, arrivals, out, in.q, in.k, in.v, in.table, in.lens, s.B, s.HQ, s.PS, s.MAXP, scale);
    CHECK(cudaGetLastError());
}

void launchPlan(const Shape& s, const Plan& p, const Set& in, float* ws, __nv_bfloat16* out, cudaStream_t st)
{
    launchSplit(s, p, in, ws, out, st);
    if (p.mergeBlocks == 0)
        return;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(p.mergeBlocks);
    cfg.blockDim = dim3(256);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const float* wsConst = ws;
    CHECK(cudaLaunchKernelEx(&cfg, decode_attention_merge, out, wsConst, s.B, s.HQ));
}

// The median over reps of an event pair around enqueue(rep), divided by per; two warm-up reps.
template <typename Enqueue>
double medianUs(cudaStream_t st, int reps, int per, Enqueue enqueue)
{
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int rep = 0; rep < reps + 2; ++rep) {
        enqueue(rep, e0);
        CHECK(cudaEventRecord(e1, st));
        CHECK(cudaEventSynchronize(e1));
        float t;
        CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (rep >= 2)
            ms.push_back(t);
    }
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1e3 / per;
}

double copyBytesPerSecond(cudaStream_t st)
{
    const size_t n = size_t(1) << 30;
    void *a, *b;
    CHECK(cudaMalloc(&a, n));
    CHECK(cudaMalloc(&b, n));
    const double us = medianUs(st, 10, 1, [&](int, cudaEvent_t e0) {
        CHECK(cudaEventRecord(e0, st));
        CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, st));
    });
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    return 2.0 * n / (us * 1e-6);
}

struct Result {
    Shape s;
    bool correct;
    double relL2, maxErr, us, copyUs, readUs;
    // Where a plan's time beyond the stream goes (round 9: 73.6 us in a graph of 31 plans, 80.9 us in the harness at
    // B=16 ctx 4096): a graph of one plan a replay; three stream launches an event pair, as the harness times
    // kernels over 20 us, alone and after dirtying L2 as its poisoning of three workspace sets does; the split
    // kernel alone in the graph of R.
    double oneUs, streamUs, dirtyStreamUs, splitUs;
    int ctas;
};

void decompose(const Shape& s, const Plan& plan, const std::vector<Set>& in, float* ws, __nv_bfloat16* out,
    cudaStream_t st, int perGraph, Result& r)
{
    const int sets = static_cast<int>(in.size());
    std::vector<cudaGraphExec_t> one(sets);
    for (int i = 0; i < sets; ++i) {
        cudaGraph_t g;
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        launchPlan(s, plan, in[i], ws, out, st);
        CHECK(cudaStreamEndCapture(st, &g));
        CHECK(cudaGraphInstantiate(&one[i], g, 0));
        CHECK(cudaGraphDestroy(g));
    }
    r.oneUs = medianUs(st, 15, 1, [&](int rep, cudaEvent_t e0) {
        CHECK(cudaEventRecord(e0, st));
        CHECK(cudaGraphLaunch(one[rep % sets], st));
    });
    for (auto g : one)
        CHECK(cudaGraphExecDestroy(g));
    constexpr int kPerSample = 3;
    void* dirty;
    const size_t dirtyBytes = 3 * plan.workspace;
    CHECK(cudaMalloc(&dirty, dirtyBytes));
    const auto streamed = [&](bool dirtyL2) {
        return medianUs(st, 15, kPerSample, [&](int rep, cudaEvent_t e0) {
            if (dirtyL2)
                CHECK(cudaMemsetAsync(dirty, 0xff, dirtyBytes, st));
            CHECK(cudaEventRecord(e0, st));
            for (int i = 0; i < kPerSample; ++i)
                launchPlan(s, plan, in[(rep * kPerSample + i) % sets], ws, out, st);
        });
    };
    r.streamUs = streamed(false);
    r.dirtyStreamUs = streamed(true);
    CHECK(cudaFree(dirty));
    cudaGraph_t g;
    cudaGraphExec_t split;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < perGraph; ++i)
        launchSplit(s, plan, in[i % sets], ws, out, st);
    CHECK(cudaStreamEndCapture(st, &g));
    CHECK(cudaGraphInstantiate(&split, g, 0));
    r.splitUs = medianUs(st, 15, perGraph, [&](int, cudaEvent_t e0) {
        CHECK(cudaEventRecord(e0, st));
        CHECK(cudaGraphLaunch(split, st));
    });
    CHECK(cudaGraphExecDestroy(split));
    CHECK(cudaGraphDestroy(g));
}

Result runShape(const Shape& s, int sms, double copyRate, unsigned seed, cudaStream_t st)
{
    Result r {};
    r.s = s;
    const Plan plan = planFor(s, sms);
    r.ctas = plan.ctas;
    const long long pages = (long long)s.B * s.MAXP;
    const long long kvElems = pages * s.PS * kHkv * kD, qElems = (long long)s.B * s.HQ * kD;
    std::mt19937 rng(seed);
    std::vector<int> table(pages), lens(s.B);
    for (long long i = 0; i < pages; ++i)
        table[i] = static_cast<int>(i);
    // KL_DRIVER_PAGES=contiguous keeps the pages in order: the same kernel over the layout SDPA reads.
    const char* pagesMode = std::getenv("KL_DRIVER_PAGES");
    if (!pagesMode || std::strcmp(pagesMode, "contiguous") != 0)
        std::shuffle(table.begin(), table.end(), rng);
    for (int b = 0; b < s.B; ++b)
        lens[b] = std::uniform_int_distribution<int>((s.MAXP - 1) * s.PS + 1, s.MAXP * s.PS)(rng);
    if (s.MAXP == 1 && s.B > 1)
        lens[0] = 1; // with SEQ > 1, CTAs whose share is empty

    // Input sets: enough that the timed loop reads at least 2 x L2 of K/V between two visits of one set.
    const double setBytes = 2.0 * kvElems * 2;
    const int sets = s.timed ? std::max(1, std::min(16, static_cast<int>(std::ceil(120e6 / setBytes)))) : 1;
    std::vector<Set> in(sets);
    for (int i = 0; i < sets; ++i) {
        CHECK(cudaMalloc(&in[i].q, qElems * 2));
        CHECK(cudaMalloc(&in[i].k, kvElems * 2));
        CHECK(cudaMalloc(&in[i].v, kvElems * 2));
        CHECK(cudaMalloc(&in[i].table, pages * 4));
        CHECK(cudaMalloc(&in[i].lens, s.B * 4));
        fillBf16<<<1024, 256, 0, st>>>(in[i].q, qElems, seed * 3 + 1);
        fillBf16<<<4096, 256, 0, st>>>(in[i].k, kvElems, seed * 3 + 2);
        fillBf16<<<4096, 256, 0, st>>>(in[i].v, kvElems, seed * 3 + 3);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(in[i].table, table.data(), pages * 4, cudaMemcpyHostToDevice, st));
        CHECK(cudaMemcpyAsync(in[i].lens, lens.data(), s.B * 4, cudaMemcpyHostToDevice, st));
    }
    __nv_bfloat16 *out, *ref;
    float* ws;
    CHECK(cudaMalloc(&out, qElems * 2));
    CHECK(cudaMalloc(&ref, qElems * 2));
    CHECK(cudaMalloc(&ws, plan.workspace));
    CHECK(cudaFuncSetAttribute(decode_attention_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)plan.smem));

    // Checked run: reference in fp64, ours on poisoned output and workspace.
    decode_attention_reference<<<dim3(s.B, s.HQ), kD, 0, st>>>(
        ref, in[0].q, in[0].k, in[0].v, in[0].table, in[0].lens, s.HQ, s.PS, s.MAXP, kHkv, 1.f / std::sqrt(128.f));
    CHECK(cudaGetLastError());
    char what[96];
    std::snprintf(what, sizeof what, "B=%d HQ=%d PS=%d MAXP=%d, %d CTAs", s.B, s.HQ, s.PS, s.MAXP, plan.ctas);
    CHECK(cudaStreamSynchronize(st)); // the reference
    // Twice: the first on a poisoned output and workspace (an unwritten element fails), the second on a poisoned
    // output and the workspace the first left, as back-to-back launches in a serving loop see it.
    CHECK(cudaMemsetAsync(ws, 0xff, plan.workspace, st));
    for (int run = 0; run < 2; ++run) {
        CHECK(cudaMemsetAsync(out, 0xff, qElems * 2, st));
        launchPlan(s, plan, in[0], ws, out, st);
        finishOrExit(st, what);
    }
    std::vector<__nv_bfloat16> hostOut(qElems), hostRef(qElems);
    CHECK(cudaMemcpy(hostOut.data(), out, qElems * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hostRef.data(), ref, qElems * 2, cudaMemcpyDeviceToHost));
    double diff2 = 0, ref2 = 0;
    bool finite = true;
    for (long long i = 0; i < qElems; ++i) {
        const double c = __bfloat162float(hostOut[i]), x = __bfloat162float(hostRef[i]);
        finite &= std::isfinite(c);
        diff2 += (c - x) * (c - x);
        ref2 += x * x;
    }
    const double rms = std::sqrt(ref2 / qElems);
    r.relL2 = std::sqrt(diff2 / std::max(ref2, 1e-30));
    for (long long i = 0; i < qElems; ++i) {
        const double c = __bfloat162float(hostOut[i]), x = __bfloat162float(hostRef[i]);
        r.maxErr = std::max(r.maxErr, std::fabs(c - x) / std::max({ std::fabs(x), rms, 1.0 }));
    }
    r.correct = finite && r.relL2 <= 1.0 / 256 && r.maxErr <= 1.0 / 64;

    const double tokens = (double)(s.MAXP - 1) * s.PS + 1;
    const double bytes
        = 2.0 * 2 * s.B * tokens * kHkv * kD + 2.0 * 2 * s.B * s.HQ * kD + 4.0 * s.B * s.MAXP + 4.0 * s.B;
    r.copyUs = bytes / copyRate * 1e6;
    if (s.timed) {
        const int perGraph = std::max(sets, std::min(64, std::max(1, static_cast<int>(2e-3 / (bytes / copyRate)))));
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < perGraph; ++i)
            launchPlan(s, plan, in[i % sets], ws, out, st);
        CHECK(cudaStreamEndCapture(st, &graph));
        CHECK(cudaGraphInstantiate(&exec, graph, 0));
        r.us = medianUs(st, 15, perGraph, [&](int, cudaEvent_t e0) {
            CHECK(cudaEventRecord(e0, st));
            CHECK(cudaGraphLaunch(exec, st));
        });
        decompose(s, plan, in, ws, out, st, perGraph, r);
        unsigned* sink;
        CHECK(cudaMalloc(&sink, 4));
        // Scaled to the problem's bytes: the buffers hold MAXP * PS tokens a sequence, the bound counts fewer.
        r.readUs = medianUs(st, 8, 1, [&](int rep, cudaEvent_t e0) {
            const Set& x = in[rep % sets];
            CHECK(cudaEventRecord(e0, st));
            readStream<<<sms * 8, 256, 0, st>>>(reinterpret_cast<const uint4*>(x.k), kvElems * 2 / 16, sink);
            readStream<<<sms * 8, 256, 0, st>>>(reinterpret_cast<const uint4*>(x.v), kvElems * 2 / 16, sink);
        }) * (bytes / (2.0 * kvElems * 2));
        CHECK(cudaGetLastError());
        CHECK(cudaFree(sink));
        CHECK(cudaGraphExecDestroy(exec));
        CHECK(cudaGraphDestroy(graph));
    }
    for (auto& x : in) {
        CHECK(cudaFree(x.q));
        CHECK(cudaFree(x.k));
        CHECK(cudaFree(x.v));
        CHECK(cudaFree(x.table));
        CHECK(cudaFree(x.lens));
    }
    CHECK(cudaFree(out));
    CHECK(cudaFree(ref));
    CHECK(cudaFree(ws));
    std::printf("B=%d HQ=%d PS=%d MAXP=%d: %s rel_l2 %.2e max_err %.2e, %d CTAs", s.B, s.HQ, s.PS, s.MAXP,
        r.correct ? "correct" : "WRONG", r.relL2, r.maxErr, r.ctas);
    if (s.timed)
        std::printf(", %.1f us (copy bound %.1f us, %.0f%%; read stream %.1f us; one plan a graph %.1f, stream x3 "
                    "%.1f, after dirtying L2 %.1f, split kernel alone %.1f)",
            r.us, r.copyUs, 100 * r.copyUs / r.us, r.readUs, r.oneUs, r.streamUs, r.dirtyStreamUs, r.splitUs);
    std::printf("\n");
    std::fflush(stdout);
    return r;
}

// SEQ > 0: the P CTAs of a sequence (every P up to SEQ) walk shares that hold each of its tokens once, every copied
// row inside the share, over any length 1 .. 131072.
bool sequenceSharesHold(int cases)
{
    std::mt19937 rng(11);
    int failures = 0;
    for (int k = 0; k < cases && failures < 10; ++k) {
        const int len = k < 300 ? 1 + k / 8 : 1 + static_cast<int>(rng() % 131072); // short ones: empty shares
        const int prefix[2] = { 0, len };
        std::vector<int> seen(len, 0);
        const int P = 1 + k % kSeq;
        for (int r = 0; r < P; ++r) {
            const int g0 = shareStart(r, P, len), g1 = shareStart(r + 1, P, len);
            Walk w;
            for (bool more = walkStart(w, prefix, 1, g0, g1); more; more = walkNext(w, prefix, 1, g0, g1))
                for (int row = 0; row < TT; ++row) {
                    const int src = sourceToken(w, row);
                    if (src < g0 || src >= g1)
                        failures += std::printf("sequence shares: len %d, CTA %d copies token %d outside its share\n",
                                        len, r, src)
                            > 0;
                    if (w.t + row < w.end)
                        ++seen[w.t + row];
                }
        }
        for (int g = 0; g < len; ++g)
            if (seen[g] != 1)
                failures += std::printf("sequence shares: len %d, token %d seen %d times\n", len, g, seen[g]) > 0;
    }
    std::printf("sequence shares over %d lengths: %s\n", cases, failures ? "FAILED" : "hold");
    return failures == 0;
}

// The split kernel's walk and the merge's view of it, simulated on the CPU with the template's own index functions
// over random batches (any lengths in 1 .. MAXP * PS, not only the last page) and every grid size up to 300: every
// token of every sequence is in exactly one tile of one CTA and every copied row inside its piece; a sequence is
// written whole exactly when one CTA holds it, else the merge's CTAs c0 .. c1 with tokens are exactly those holding
// a piece of it, each read from the slot the split kernel wrote; slots are distinct and within the workspace.
bool partitionHolds(int cases)
{
    if (SEQ > 0)
        return sequenceSharesHold(cases);
    std::mt19937 rng(11);
    int failures = 0;
    auto fail = [&](const std::string& what) {
        if (failures++ < 10)
            std::printf("partition: %s\n", what.c_str());
    };
    for (int k = 0; k < cases && failures == 0; ++k) {
        const int PS = rng() % 2 ? 16 : 64, B = 1 + rng() % (k % 3 == 0 ? 256 : 12), MAXP = 1 + rng() % 40;
        std::vector<int> prefix(B + 1, 0);
        for (int b = 0; b < B; ++b) {
            const int len = k % 2 ? 1 + rng() % (MAXP * PS)
                                  : std::uniform_int_distribution<int>((MAXP - 1) * PS + 1, MAXP * PS)(rng);
            prefix[b + 1] = prefix[b] + len;
        }
        const int total = prefix[B];
        const int maxCtas = std::min(256, ceilDiv((long long)B * MAXP * PS, MINTOK));
        for (int C = 1; C <= std::min(300, maxCtas); C += 1 + (C > 40 ? C / 8 : 0)) {
            const std::string where = "B=" + std::to_string(B) + " PS=" + std::to_string(PS)
                + " MAXP=" + std::to_string(MAXP) + " C=" + std::to_string(C);
            std::vector<int> seen(total, 0);
            std::vector<std::vector<std::pair<long long, bool>>> pieces(B); // (slot or CTA, whole)
            std::vector<int> slotUse(2 * C, 0);
            for (int c = 0; c < C; ++c) {
                const int g0 = rangeStart(c, C, total), g1 = rangeStart(c + 1, C, total);
                Walk w;
                for (bool more = walkStart(w, prefix.data(), B, g0, g1); more;) {
                    const Walk piece = w;
                    for (int r = 0; r < TT; ++r) {
                        const int src = sourceToken(w, r);
                        if (src < w.begin || src >= w.end || src / PS >= MAXP)
                            fail(where + ": row outside its piece");
                        if (w.t + r < w.end)
                            ++seen[prefix[w.b] + w.t + r];
                    }
                    const bool ends = w.t + TT >= w.end;
                    more = walkNext(w, prefix.data(), B, g0, g1);
                    if (!ends)
                        continue;
                    if (wholeSequence(piece, prefix.data())) {
                        pieces[piece.b].push_back({ c, true });
                    } else {
                        const long long slot = slotOf(c, C, total, prefix[piece.b]);
                        if (slot < 0 || slot >= 2 * C || slot >= 2 * maxCtas || slotUse[slot]++)
                            fail(where + ": slot " + std::to_string(slot) + " out of range or used twice");
                        pieces[piece.b].push_back({ slot, false });
                    }
                }
            }
            for (int g = 0; g < total; ++g)
                if (seen[g] != 1)
                    fail(where + ": token " + std::to_string(g) + " seen " + std::to_string(seen[g]) + " times");
            for (int b = 0; b < B; ++b) {
                const long long lo = prefix[b], hi = prefix[b + 1];
                const long long c0 = rangeOwner(lo, C, total), c1 = rangeOwner(hi - 1, C, total);
                if (c0 == c1) {
                    if (pieces[b].size() != 1 || !pieces[b][0].second || pieces[b][0].first != c0)
                        fail(where + ": sequence " + std::to_string(b) + " held by one CTA is not written whole");
                    continue;
                }
                std::vector<long long> expected, written;
                for (long long cta = c0; cta <= c1; ++cta)
                    if (holdsTokens(cta, C, total))
                        expected.push_back(slotOf(cta, C, total, lo));
                for (const auto& [slot, whole] : pieces[b]) {
                    if (whole)
                        fail(where + ": a split sequence written whole");
                    written.push_back(slot);
                }
                std::sort(written.begin(), written.end());
                if (expected != written)
                    fail(where + ": the merge reads other slots than the split kernel wrote for sequence "
                        + std::to_string(b));
            }
        }
    }
    std::printf("partition check over %d batches: %s\n", cases, failures ? "FAILED" : "holds");
    return failures == 0;
}

} // namespace

int main(int argc, char** argv)
{
    const bool partitionOnly = argc > 1 && std::strcmp(argv[1], "--partition-only") == 0;
    if (!partitionHolds(partitionOnly ? 3000 : 300))
        return 1;
    if (partitionOnly)
        return 0;
    int dev = 0, sms = 0;
    CHECK(cudaSetDevice(dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const double copyRate = copyBytesPerSecond(st);
    std::printf("template_sm90.cu TT=%d STAGES=%d MINTOK=%d EVICT=%d SEQ=%d LAZY=%d FUSE=%d on %d SMs, copy %.2f TB/s\n",
        TT, STAGES, MINTOK, EVICT, SEQ, LAZY, FUSE, sms, copyRate / 1e12);
    // The verify shapes and corner cases (one CTA, CTAs without tokens, a batch of 256 short sequences, pages of 64),
    // then the tuning shapes, timed.
    const Shape shapes[] = { { 1, 32, 16, 1, false }, { 3, 64, 64, 5, false }, { 5, 128, 16, 37, false },
        { 256, 32, 16, 2, false }, { 1, 128, 64, 1, false }, { 7, 32, 16, 3, false }, { 200, 128, 64, 3, false },
        { 4, 64, 16, 1, false }, { 40, 32, 16, 1, false },
        { 1, 32, 16, 256, true }, { 16, 32, 16, 256, true }, { 64, 64, 16, 512, true }, { 128, 128, 64, 32, true },
        { 4, 32, 64, 2048, true } };
    std::vector<Result> results;
    unsigned seed = 7;
    // KL_DRIVER_SHAPE="B,HQ,PS,MAXP": that shape alone, checked and not timed (few launches, for a profiler).
    if (const char* only = std::getenv("KL_DRIVER_SHAPE")) {
        Shape s {};
        if (std::sscanf(only, "%d,%d,%d,%d", &s.B, &s.HQ, &s.PS, &s.MAXP) != 4) {
            std::printf("KL_DRIVER_SHAPE: '%s' is not B,HQ,PS,MAXP\n", only);
            return 2;
        }
        return runShape(s, sms, copyRate, seed, st).correct ? 0 : 1;
    }
    for (const Shape& s : shapes)
        results.push_back(runShape(s, sms, copyRate, seed++, st));
    bool allCorrect = true;
    std::printf("\n| shape | CTAs | ours us | copy bound us | %% copy BW | read stream us | one plan a graph | "
                "stream x3 | after dirty L2 | split alone | correct |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : results) {
        allCorrect &= r.correct;
        if (!r.s.timed)
            continue;
        std::printf("| B=%d HQ=%d PS=%d ctx %d | %d | %.1f | %.1f | %.0f%% | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n",
            r.s.B, r.s.HQ, r.s.PS, r.s.MAXP * r.s.PS, r.ctas, r.us, r.copyUs, 100 * r.copyUs / r.us, r.readUs, r.oneUs,
            r.streamUs, r.dirtyStreamUs, r.splitUs, r.correct ? "yes" : "NO");
    }
    std::printf("%s\n", allCorrect ? "all shapes correct" : "SOME SHAPES WRONG");
    return allCorrect ? 0 : 1;
}
