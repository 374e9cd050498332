#include "session_fixture.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace kl::test {

std::string kernelSource(int block, int vec, bool fastMath)
{
    std::string s;
    s += "// RMSNorm over rows of H elements: y = x * rsqrt(mean(x^2) + eps) * w\n";
    s += "// @kl:param BLOCK = " + std::to_string(block) + " in [64, 128, 256, 512, 1024]\n";
    s += "// @kl:param VEC = " + std::to_string(vec) + " in [1, 2, 4, 8]\n";
    s += "// @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)\n";
    s += "#include <cuda_bf16.h>\n\n";
    s += "__global__ void __launch_bounds__(BLOCK) rmsnorm_kernel(__nv_bfloat16* __restrict__ y,\n";
    s += "    const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w, int T, int H, float eps)\n";
    s += "{\n";
    s += "    const int row = blockIdx.x;\n";
    s += "    const __nv_bfloat16* xr = x + (size_t)row * H;\n";
    s += "    float sum = 0.f;\n";
    if (vec > 1) {
        s += "    for (int i = threadIdx.x * VEC; i < H; i += BLOCK * VEC) {\n";
        s += "        #pragma unroll\n";
        s += "        for (int v = 0; v < VEC; ++v) {\n";
        s += "            const float f = __bfloat162float(xr[i + v]);\n";
        s += "            sum += f * f;\n";
        s += "        }\n";
        s += "    }\n";
    } else {
        s += "    for (int i = threadIdx.x; i < H; i += BLOCK) {\n";
        s += "        const float f = __bfloat162float(xr[i]);\n";
        s += "        sum += f * f;\n";
        s += "    }\n";
    }
    s += "    __shared__ float partial[32];\n";
    s += "    for (int o = 16; o > 0; o >>= 1)\n";
    s += "        sum += __shfl_xor_sync(0xffffffff, sum, o);\n";
    s += "    if ((threadIdx.x & 31) == 0)\n";
    s += "        partial[threadIdx.x >> 5] = sum;\n";
    s += "    __syncthreads();\n";
    s += "    if (threadIdx.x < 32) {\n";
    s += "        sum = threadIdx.x < BLOCK / 32 ? partial[threadIdx.x] : 0.f;\n";
    s += "        for (int o = 16; o > 0; o >>= 1)\n";
    s += "            sum += __shfl_xor_sync(0xffffffff, sum, o);\n";
    s += "        if (threadIdx.x == 0)\n";
    s += "            partial[0] = sum;\n";
    s += "    }\n";
    s += "    __syncthreads();\n";
    s += fastMath ? "    const float scale = __frsqrt_rn(partial[0] / H + eps);\n"
                  : "    const float scale = rsqrtf(partial[0] / H + eps);\n";
    s += "    for (int i = threadIdx.x; i < H; i += BLOCK)\n";
    s += "        y[(size_t)row * H + i] = __float2bfloat16(__bfloat162float(xr[i]) * scale * "
         "__bfloat162float(w[i]));\n";
    s += "}\n";
    return s;
}

namespace {

    kl::Evaluation evaluation(const std::string& id, double speed, bool correct, std::int64_t t, bool flag)
    {
        kl::Evaluation e;
        e.candidateId = id;
        e.verdict = correct ? kl::Verdict::Accepted : kl::Verdict::Rejected;
        const std::int64_t shapes[][2] = { { 1, 4096 }, { 128, 4096 }, { 4096, 8192 }, { 16384, 8192 } };
        double logSum = 0;
        int i = 0;
        for (const auto& dims : shapes) {
            kl::ShapeResult r;
            r.shape.dims = { { "T", dims[0] }, { "H", dims[1] } };
            r.heldOut = i == 3;
            kl::CorrectnessStats c;
            c.relL2 = correct ? 2e-3 * std::pow(0.6, i) : 0.3;
            c.maxAbs = correct ? 1e-2 : 2.0;
            c.passed = correct;
            c.distribution = "normal";
            r.checks.push_back(c);
            r.correct = correct;
            const double base = 3.0 + 0.004 * static_cast<double>(dims[0] * dims[1]) / 1000.0;
            kl::TimingStats b;
            b.medianUs = base;
            b.samples = 50;
            kl::TimingStats tm;
            tm.medianUs = base / (speed * (1.0 + 0.05 * i));
            tm.p10Us = tm.medianUs * 0.98;
            tm.p90Us = tm.medianUs * 1.03;
            tm.ciLowUs = tm.medianUs * 0.99;
            tm.ciHighUs = tm.medianUs * 1.01;
            tm.samples = 50;
            r.timing = tm;
            r.baselineTiming = b;
            r.speedup = b.medianUs / tm.medianUs;
            r.speedupCiLow = r.speedup * 0.97;
            r.speedupCiHigh = r.speedup * 1.03;
            if (!r.heldOut)
                logSum += std::log(r.speedup);
            e.shapes.push_back(r);
            ++i;
        }
        e.objective = std::exp(logSum / 3);
        e.objectiveCiLow = e.objective * 0.98;
        e.objectiveCiHigh = e.objective * 1.02;
        if (!correct)
            e.reasons.push_back(
                { "correctness.rel-l2", "rel. L2 error 0.3 exceeds the tolerance 0.01 on T=128,H=4096", 0, true });
        if (flag)
            e.reasons.push_back(
                { "physics.near-roofline", "faster than 90% of the copy bandwidth: check for skipped work", 0, false });
        e.deviceAfter.available = true;
        e.deviceAfter.smClockMHz = 1980;
        e.deviceAfter.memClockMHz = 3201;
        e.deviceAfter.temperatureC = 41;
        e.startedMs = t;
        e.finishedMs = t + 1;
        return e;
    }

} // namespace

std::string writeSession(const std::filesystem::path& dir, const FixtureOptions& options)
{
    kl::Session header;
    header.id = "gui-fixture";
    header.problemName = "rmsnorm"; // in the catalogue, so views can show its tolerance
    header.problemFolder = "/elsewhere/kernels/problems/rmsnorm"; // as recorded on another machine
    header.device.name = "NVIDIA H200";
    header.device.arch = "sm_90a";
    header.device.ccMajor = 9;
    header.device.smCount = 132;
    header.device.smClockMHz = 1980;
    header.settings.agent = "tuner:anneal";
    header.settings.budget.maxEvaluations = 40;
    auto store = kl::SessionStore::create(dir, header);

    kl::Hypothesis h;
    h.text = "The row reduction is latency-bound: vectorise the loads and reduce with warp shuffles.";
    store->addHypothesis(h);
    const std::string hid = store->session().hypotheses.begin()->first;

    std::int64_t t = 1'000'000;
    kl::Candidate root;
    root.source = kernelSource(256, 1, false);
    root.params = { { "BLOCK", 256 }, { "VEC", 1 } };
    root.author = kl::Author::Reference;
    store->proposeCandidate(root);
    store->recordEvaluation(evaluation("c0001", 1.0, true, t++, false));

    const int blocks[] = { 128, 256, 512, 1024 };
    const int vecs[] = { 2, 4, 8 };
    // Like the research loop: proposals branch from the best so far, so the tree is wide and shallow.
    std::string parent = "c0001";
    double best = 1.0;
    for (int i = 0; i < options.tunerChildren; ++i) {
        kl::Candidate c;
        const int block = blocks[i % 4];
        const int vec = vecs[i % 3];
        c.source = kernelSource(block, vec, i % 5 == 4);
        c.params = { { "BLOCK", block }, { "VEC", vec } };
        c.parentId = parent;
        c.author = kl::Author::Tuner;
        c.agent = "tuner:anneal";
        c.hypothesisId = hid;
        const auto e = store->proposeCandidate(c);
        const std::string id = e.candidateId;
        store->setStatus(id, kl::CandidateStatus::Compiling);
        store->setStatus(id, kl::CandidateStatus::Verifying);
        store->setStatus(id, kl::CandidateStatus::Timing);
        const bool correct = i % 3 != 2;
        const double speed = 1.2 + 1.4 * (1.0 - std::exp(-i / 25.0)) + 0.12 * ((i * 7) % 5 - 2);
        store->recordEvaluation(evaluation(id, speed, correct, t++, false));
        if (correct && speed > best) {
            best = speed;
            parent = id;
            store->moveHead(id, "new best: proposals branch from it");
        }
    }
    if (options.refereeFlag) {
        kl::Candidate c;
        c.source = kernelSource(512, 8, true);
        c.params = { { "BLOCK", 512 }, { "VEC", 8 } };
        c.parentId = parent;
        c.author = kl::Author::Tuner;
        c.agent = "tuner:anneal";
        const auto e = store->proposeCandidate(c);
        store->recordEvaluation(evaluation(e.candidateId, 2.6, true, t++, true));
    }
    if (options.pendingLlm) {
        kl::Hypothesis llmH;
        llmH.text = "Use one warp per row for H <= 4096 and keep the row in registers.";
        const std::string llmHid = store->addHypothesis(llmH).data.at("id").get<std::string>();
        store->agentMessage({ { "type", "llm.request" }, { "call", 1 }, { "provider", "openai" },
            { "model", "gpt-test" }, { "hypothesis", llmHid }, { "base_candidate", parent } });
        store->agentMessage({ { "type", "llm.reply" }, { "call", 1 }, { "model", "gpt-test" },
            { "text",
                "NOTE: one warp per row keeps the whole row in registers for H <= 4096.\n"
                "```diff\n-    for (int i = threadIdx.x; i < H; i += BLOCK)\n"
                "+    for (int i = threadIdx.x * VEC; i < H; i += BLOCK * VEC)\n```" },
            { "usage", { { "input_tokens", 5120 }, { "output_tokens", 380 } } }, { "elapsed_ms", 8400 } });
        store->agentMessage(
            { { "agent", "llm:openai" }, { "kind", "reply" }, { "text", "I will keep the row in registers " } });
        store->agentMessage(
            { { "agent", "llm:openai" }, { "kind", "delta" }, { "delta", "and reduce with shuffles." } });
        kl::Candidate c;
        c.source = kernelSource(128, 8, true);
        c.params = { { "BLOCK", 128 }, { "VEC", 8 } };
        c.parentId = parent;
        c.author = kl::Author::Llm;
        c.agent = "llm:openai";
        c.hypothesisId = llmHid;
        const auto e = store->proposeCandidate(c);
        store->setStatus(e.candidateId, kl::CandidateStatus::PendingReview, "LLM proposal waits for the engineer");
    }
    return header.id;
}

void copyWithTiming(const std::filesystem::path& from, const std::filesystem::path& to, std::int64_t stepMs)
{
    std::vector<kl::Event> events;
    const kl::Session s = kl::SessionStore::load(from, nullptr, &events);
    kl::Session header = s;
    auto store = kl::SessionStore::create(to, header);
    const std::int64_t base = kl::nowMs();
    std::int64_t i = 1;
    for (kl::Event e : events) {
        if (e.kind == kl::EventKind::SessionCreated)
            continue;
        e.seq = 0;
        e.timeMs = base + stepMs * i++;
        store->append(e);
    }
}

void writeChromeTrace(const std::filesystem::path& file, int steps)
{
    nlohmann::json events = nlohmann::json::array();
    const char* kernels[]
        = { "rmsnorm_kernel<256, 8>", "gemm_bf16_tn_128x128x64", "silu_and_mul_kernel", "softmax_rows" };
    const double durations[] = { 9.5, 48.0, 6.0, 11.0 };
    double t = 1000;
    int correlation = 1;
    for (int step = 0; step < steps; ++step) {
        const double stepStart = t;
        for (int k = 0; k < 4; ++k) {
            events.push_back(
                { { "ph", "X" }, { "cat", "cuda_runtime" }, { "name", "cudaLaunchKernel" }, { "pid", 4242 },
                    { "tid", 4242 }, { "ts", t }, { "dur", 4.0 }, { "args", { { "correlation", correlation } } } });
            const double gpuStart = t + 6.0 + (k == 1 ? 2.0 : 0.0);
            events.push_back({ { "ph", "X" }, { "cat", "kernel" }, { "name", kernels[k] }, { "pid", 0 }, { "tid", 7 },
                { "ts", gpuStart }, { "dur", durations[k] * (1.0 + 0.03 * ((step * 3 + k) % 4)) },
                { "args",
                    { { "device", 0 }, { "stream", 7 }, { "correlation", correlation },
                        { "grid", { k == 1 ? 132 : 4096, 1, 1 } }, { "block", { k == 1 ? 384 : 256, 1, 1 } },
                        { "registers per thread", k == 1 ? 168 : 32 }, { "shared memory", k == 1 ? 98304 : 128 },
                        { "est. achieved occupancy %", k == 1 ? 19 : 75 } } } });
            ++correlation;
            t += 5.0 + durations[k] * 0.8;
        }
        events.push_back({ { "ph", "X" }, { "cat", "gpu_memcpy" }, { "name", "Memcpy DtoD (Device -> Device)" },
            { "pid", 0 }, { "tid", 13 }, { "ts", stepStart + 20 }, { "dur", 14.0 },
            { "args", { { "device", 0 }, { "stream", 13 }, { "bytes", 33554432 } } } });
        events.push_back(
            { { "ph", "X" }, { "cat", "user_annotation" }, { "name", "decode_step_" + std::to_string(step) },
                { "pid", 4242 }, { "tid", 4242 }, { "ts", stepStart - 2 }, { "dur", t - stepStart + 30 } });
        t += 40;
    }
    nlohmann::json doc = { { "traceEvents", events }, { "displayTimeUnit", "ns" } };
    kl::writeFileAtomic(file, doc.dump());
}

} // namespace kl::test
