// The harness on a real GPU: honest candidates pass on every problem; deliberately broken kernels are caught
// by the rule that names their fault; a fault or a hang costs only the worker, which is restarted.
#include "core/json_io.h"
#include "kernels/gpu_evaluator.h"
#include "kernels/harness_plan.h"
#include "kernels/worker_protocol.h"
#include "tests/support/gpu_available.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <gtest/gtest.h>

namespace {

kl::Problem problem(const std::string& name)
{
    return kl::loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/" + name);
}

kl::GpuEvaluatorOptions options()
{
    kl::GpuEvaluatorOptions o;
    o.compileCacheDir = std::filesystem::temp_directory_path() / "kl-gpu-test-cache";
    o.verifyTimeoutSeconds = 60;
    if (const char* w = std::getenv("KL_WORKER"))
        o.worker.command = { w };
    return o;
}

kl::EvaluateOptions quick()
{
    kl::EvaluateOptions e;
    e.maxSecondsPerShape = 0.2;
    e.heldOutCount = 3;
    e.seed = 12345;
    return e;
}

bool hasRule(const kl::Evaluation& e, const std::string& rule)
{
    return std::any_of(e.reasons.begin(), e.reasons.end(), [&](const kl::VerdictReason& r) { return r.rule == rule; });
}

std::string reasonsText(const kl::Evaluation& e)
{
    std::string s = std::string("verdict ") + kl::verdictName(e.verdict) + ":";
    for (const auto& r : e.reasons)
        s += "\n  " + r.rule + ": " + r.message;
    if (!e.compile.ok)
        s += "\n" + e.compile.log;
    return s;
}

kl::Candidate rmsnormCandidate(const std::string& body, const std::string& id)
{
    kl::Candidate c;
    c.id = id;
    c.source
        = "#include <cuda_bf16.h>\n"
          "// @kl:launch bad grid=(T) block=(256) smem=0 args=(y, x, w, T, H, eps)\n"
          "extern \"C\" __global__ void bad(__nv_bfloat16* y, __nv_bfloat16* x, const __nv_bfloat16* w, int T,\n"
          "                                 int H, float eps) {\n"
          "  __shared__ float red[256];\n"
          "  const long long row = blockIdx.x;\n"
          "  float ss = 0.f;\n"
          "  for (int i = threadIdx.x; i < H; i += 256) { float v = __bfloat162float(x[row * H + i]); ss += v * v; }\n"
          "  red[threadIdx.x] = ss; __syncthreads();\n"
          "  for (int s = 128; s > 0; s /= 2) { if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s]; "
          "__syncthreads(); }\n"
          "  float inv = rsqrtf(red[0] / H + eps);\n"
        + body + "\n}\n";
    return c;
}

const char* kHonestWrite
    = "  for (int i = threadIdx.x; i < H; i += 256)\n"
      "    y[row * H + i] = __float2bfloat16(__bfloat162float(x[row * H + i]) * inv * __bfloat162float(w[i]));";

class HarnessGpu : public ::testing::Test {
protected:
    static void SetUpTestSuite()
    {
        if (kl::test::cudaDeviceAvailable())
            s_rms = std::make_unique<kl::GpuEvaluator>(problem("rmsnorm"), options());
    }
    static void TearDownTestSuite() { s_rms.reset(); }
    static std::unique_ptr<kl::GpuEvaluator> s_rms;
};
std::unique_ptr<kl::GpuEvaluator> HarnessGpu::s_rms;

} // namespace

TEST_F(HarnessGpu, HelloReportsTheDevice)
{
    REQUIRE_GPU();
    const auto& d = s_rms->device();
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.smCount, 0);
    EXPECT_GT(d.l2Bytes, 0);
    EXPECT_FALSE(d.arch.empty());
    EXPECT_GT(d.measuredCopyBandwidth, 1e11);
    EXPECT_FALSE(d.driverVersion.empty());
    std::printf("device %s arch %s sms %d l2 %lld copy %.2f TB/s driver %s cuda %s\n", d.name.c_str(), d.arch.c_str(),
        d.smCount, static_cast<long long>(d.l2Bytes), d.measuredCopyBandwidth / 1e12, d.driverVersion.c_str(),
        d.cudaDriverApi.c_str());
}

TEST_F(HarnessGpu, HonestCandidatesPassOnEveryProblem)
{
    REQUIRE_GPU();
    std::vector<std::string> names; // the whole catalogue: a new problem is checked without being listed here
    for (const auto& entry : std::filesystem::directory_iterator(std::string(KL_SOURCE_DIR) + "/kernels/problems"))
        if (std::filesystem::exists(entry.path() / "problem.json"))
            names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names.size(), 12u);
    for (const auto& name : names) {
        kl::GpuEvaluator ev(problem(name), options());
        for (const auto& c : { ev.templateCandidate({}, "template"), ev.baselineCandidate("baseline") }) {
            const auto e = ev.evaluate(c, quick(), kl::CancelToken {});
            // A thermal or hardware slowdown sends the measurement to review (measurement.throttled); that is the
            // machine's, not the kernel's: any other reason fails.
            const bool onlyThrottled = e.verdict == kl::Verdict::PendingReview && !e.reasons.empty()
                && std::all_of(e.reasons.begin(), e.reasons.end(),
                    [](const kl::VerdictReason& r) { return r.rule == "measurement.throttled"; });
            EXPECT_TRUE(e.verdict == kl::Verdict::Correct || onlyThrottled)
                << name << "/" << c.id << " " << reasonsText(e);
            EXPECT_TRUE(e.correctEverywhere()) << name;
            int timed = 0, heldOut = 0;
            for (const auto& s : e.shapes) {
                heldOut += s.heldOut;
                if (s.timing) {
                    ++timed;
                    EXPECT_GT(s.timing->medianUs, 0);
                    EXPECT_GT(s.speedup, 0) << s.shape.label();
                    EXPECT_LE(s.speedupCiLow, s.speedup);
                    EXPECT_GE(s.speedupCiHigh, s.speedup);
                    EXPECT_TRUE(s.graphTiming.has_value());
                }
                // A shape whose tensors total over 1 GiB runs the order checks and the graph replay only
                // (kernels/HARNESS.md); every other shape the value distributions too.
                double bytes = 0;
                for (const auto& t : ev.problem().tensors) {
                    double n = static_cast<double>(kl::dtypeBytes(t.dtype));
                    for (const auto& d : t.shape)
                        n *= d.evaluate(ev.problem().withConstants(s.shape).bindings());
                    bytes += n;
                }
                EXPECT_GE(s.checks.size(), bytes > (1ull << 30) ? 4u : 5u) << s.shape.label();
            }
            EXPECT_EQ(timed, static_cast<int>(ev.problem().tuningShapes.size())) << name;
            EXPECT_GE(heldOut, 2) << "extremes and random shapes are verified";
            EXPECT_GT(e.objective, 0);
        }
    }
}

// A screen (multi-fidelity search) takes at most its samples on its one shape, verifies that shape only, and still
// rejects a wrong kernel; the full protocol of the same candidate times every tuning shape.
TEST_F(HarnessGpu, AScreenTimesFewSamplesOnItsShapesAndStillJudgesOutputs)
{
    REQUIRE_GPU();
    kl::EvaluateOptions screen = quick();
    screen.fidelity = kl::Fidelity { 5, 1 };
    const auto honest = rmsnormCandidate(kHonestWrite, "honest-screen");
    const auto e = s_rms->evaluate(honest, screen, kl::CancelToken {});
    ASSERT_EQ(e.verdict, kl::Verdict::Correct) << reasonsText(e);
    EXPECT_EQ(e.fidelity, screen.fidelity);
    int timed = 0;
    for (const auto& s : e.shapes) {
        EXPECT_FALSE(s.heldOut) << "a screen leaves held-out shapes to the full protocol";
        if (!s.timing)
            continue;
        ++timed;
        EXPECT_GE(s.timing->samples, 1);
        EXPECT_LE(s.timing->samples, 5) << s.shape.label();
        EXPECT_LE(s.baselineTiming->samples, 5) << s.shape.label();
        EXPECT_GT(s.speedup, 0);
    }
    EXPECT_EQ(timed, 1);
    EXPECT_EQ(e.shapes.size(), 1u) << "a screen verifies only the shapes it times";
    EXPECT_GT(e.objective, 0);

    const auto full = s_rms->evaluate(honest, quick(), kl::CancelToken {});
    ASSERT_EQ(full.verdict, kl::Verdict::Correct) << reasonsText(full);
    int fullTimed = 0;
    for (const auto& s : full.shapes)
        fullTimed += s.timing.has_value() && !s.heldOut;
    EXPECT_EQ(fullTimed, static_cast<int>(s_rms->problem().tuningShapes.size()));

    const auto wrong = s_rms->evaluate(
        rmsnormCandidate("  for (int i = threadIdx.x; i < H; i += 256)\n"
                         "    y[row * H + i] = __float2bfloat16(__bfloat162float(x[row * H + i]) * inv * 1.05f * "
                         "__bfloat162float(w[i]));",
            "wrong-screen"),
        screen, kl::CancelToken {});
    EXPECT_EQ(wrong.verdict, kl::Verdict::Rejected) << reasonsText(wrong);
    EXPECT_TRUE(hasRule(wrong, "correctness.rel-l2")) << reasonsText(wrong);
}

TEST_F(HarnessGpu, WrongResultIsRejectedWithRelL2)
{
    REQUIRE_GPU();
    auto c = rmsnormCandidate("  for (int i = threadIdx.x; i < H; i += 256)\n"
                              "    y[row * H + i] = __float2bfloat16(__bfloat162float(x[row * H + i]) * inv * 1.05f * "
                              "__bfloat162float(w[i]));",
        "wrong");
    const auto e = s_rms->evaluate(c, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected) << reasonsText(e);
    EXPECT_TRUE(hasRule(e, "correctness.rel-l2")) << reasonsText(e);
}

TEST_F(HarnessGpu, ALaunchWithAnEmptyGridIsNotMade)
{
    REQUIRE_GPU();
    // The second launch would zero the output; its grid is 0 (a split-K reduction without splits), so it is skipped.
    auto c = rmsnormCandidate(kHonestWrite, "empty-grid");
    c.source += "// @kl:launch wipe grid=(T > 0 ? 0 : 1) block=(256) smem=0 args=(y, T, H)\n"
                "extern \"C\" __global__ void wipe(__nv_bfloat16* y, int T, int H) {\n"
                "  for (long long i = threadIdx.x; i < (long long)T * H; i += 256) y[i] = __float2bfloat16(0.f);\n}\n";
    const auto e = s_rms->evaluate(c, quick(), kl::CancelToken {});
    EXPECT_TRUE(e.correctEverywhere()) << reasonsText(e);
    EXPECT_FALSE(hasRule(e, "dynamic.kernel-mismatch")) << reasonsText(e);
}

// 48 KiB of dynamic shared memory launch without opting in only when the kernel has no static shared memory of its
// own; this one has 1 KiB (a softmax ring point at 48 KiB of ring failed every launch with an invalid value).
TEST_F(HarnessGpu, DynamicSharedMemoryBesideStaticSharedMemoryIsOptedInto)
{
    REQUIRE_GPU();
    auto c = rmsnormCandidate(kHonestWrite, "dynamic-48k");
    const auto at = c.source.find("smem=0");
    ASSERT_NE(at, std::string::npos);
    c.source.replace(at, 6, "smem=(48 * 1024)");
    const auto e = s_rms->evaluate(c, quick(), kl::CancelToken {});
    EXPECT_TRUE(e.correctEverywhere()) << reasonsText(e);
    EXPECT_FALSE(hasRule(e, "launch.failed")) << reasonsText(e);
}

TEST_F(HarnessGpu, PartialOutputFailsCoverage)
{
    REQUIRE_GPU();
    auto c = rmsnormCandidate(
        "  for (int i = threadIdx.x; i < H / 2; i += 256)\n"
        "    y[row * H + i] = __float2bfloat16(__bfloat162float(x[row * H + i]) * inv * __bfloat162float(w[i]));",
        "partial");
    const auto e = s_rms->evaluate(c, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected);
    EXPECT_TRUE(hasRule(e, "dynamic.coverage")) << reasonsText(e);
}

TEST_F(HarnessGpu, OutOfBoundsWriteTripsCanary)
{
    REQUIRE_GPU();
    auto c = rmsnormCandidate(std::string(kHonestWrite)
            + "\n  if (row == T - 1 && threadIdx.x < 8) y[(long long)T * H + threadIdx.x] = __float2bfloat16(1.f);",
        "oob");
    const auto e = s_rms->evaluate(c, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected);
    EXPECT_TRUE(hasRule(e, "dynamic.canary")) << reasonsText(e);
}

TEST_F(HarnessGpu, ModifiedInputIsCaught)
{
    REQUIRE_GPU();
    auto c = rmsnormCandidate(
        std::string(kHonestWrite) + "\n  __syncthreads();\n  if (threadIdx.x == 0) x[row * H] = __float2bfloat16(0.f);",
        "mutate");
    auto o = options();
    o.staticChecks = false;
    kl::GpuEvaluator ev(problem("rmsnorm"), o);
    const auto e = ev.evaluate(c, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected);
    EXPECT_TRUE(hasRule(e, "dynamic.input-modified")) << reasonsText(e);
}

TEST_F(HarnessGpu, StateCarriedBetweenLaunchesIsCaught)
{
    REQUIRE_GPU();
    auto c = rmsnormCandidate(std::string(kHonestWrite)
            + "\n  __syncthreads();\n"
              "  if (blockIdx.x == 0 && threadIdx.x == 0) { if (g_calls > 0) y[0] = __float2bfloat16(1000.f); "
              "atomicAdd(&g_calls, 1); }",
        "stateful");
    c.source = "__device__ int g_calls = 0;\n" + c.source;
    auto o = options();
    o.staticChecks = false; // the static rules would reject the mutable global before the GPU sees it
    o.ptxChecks = false;
    kl::GpuEvaluator ev(problem("rmsnorm"), o);
    const auto e = ev.evaluate(c, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected);
    EXPECT_TRUE(hasRule(e, "dynamic.state-between-launches")) << reasonsText(e);
}

TEST_F(HarnessGpu, SpecialCasedShapesFailHeldOut)
{
    REQUIRE_GPU();
    auto c
        = rmsnormCandidate("  const bool seen = T == 1 || T == 3 || T == 16 || T == 256 || T == 1000 || T == 4096 ||\n"
                           "                    T == 16384 || T == 65536;\n"
                           "  for (int i = threadIdx.x; i < H; i += 256)\n"
                           "    y[row * H + i] = __float2bfloat16(__bfloat162float(x[row * H + i]) * inv * (seen ? 1.f "
                           ": 1.1f) * __bfloat162float(w[i]));",
            "special");
    auto o = options();
    o.staticChecks = false;
    kl::GpuEvaluator ev(problem("rmsnorm"), o);
    auto opt = quick();
    opt.heldOutCount = 6;
    const auto e = ev.evaluate(c, opt, kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected);
    EXPECT_TRUE(hasRule(e, "dynamic.held-out-shape")) << reasonsText(e);
    for (const auto& s : e.shapes) {
        if (!s.heldOut) {
            EXPECT_TRUE(s.correct) << s.shape.label();
        }
    }
}

TEST_F(HarnessGpu, IllegalAddressCostsOnlyTheWorker)
{
    REQUIRE_GPU();
    auto c = rmsnormCandidate(
        "  if (threadIdx.x == 0) ((volatile float*)(0x100))[row] = inv;\n" + std::string(kHonestWrite), "fault");
    const int crashesBefore = s_rms->client().crashes();
    const auto e = s_rms->evaluate(c, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Crashed) << reasonsText(e);
    EXPECT_TRUE(hasRule(e, "worker.crashed"));
    EXPECT_EQ(s_rms->client().crashes(), crashesBefore + 1);
    // The next candidate runs on a fresh worker.
    const auto ok = s_rms->evaluate(rmsnormCandidate(kHonestWrite, "honest"), quick(), kl::CancelToken {});
    EXPECT_EQ(ok.verdict, kl::Verdict::Correct) << reasonsText(ok);
}

TEST_F(HarnessGpu, HangIsKilledAtTheDeadline)
{
    REQUIRE_GPU();
    auto o = options();
    o.verifyTimeoutSeconds = 8;
    o.staticChecks = false;
    kl::GpuEvaluator ev(problem("rmsnorm"), o);
    ev.prepareWorker();
    ev.client().ensureStarted(); // so the deadline measures the kernel, not the worker's start
    // y[0] holds the poison pattern (a NaN), which never equals 12345: the loop never ends.
    auto c = rmsnormCandidate("  while (((volatile float*)y)[0] != 12345.f) { }\n" + std::string(kHonestWrite), "hang");
    const auto t0 = std::chrono::steady_clock::now();
    const auto e = ev.evaluate(c, quick(), kl::CancelToken {});
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(e.verdict, kl::Verdict::TimedOut) << reasonsText(e);
    EXPECT_TRUE(hasRule(e, "worker.timeout"));
    EXPECT_LT(took, 40);
    const auto ok = ev.evaluate(rmsnormCandidate(kHonestWrite, "honest"), quick(), kl::CancelToken {});
    EXPECT_EQ(ok.verdict, kl::Verdict::Correct) << reasonsText(ok);
    EXPECT_EQ(ev.client().timeouts(), 1);
}

TEST_F(HarnessGpu, CompileErrorIsAVerdict)
{
    REQUIRE_GPU();
    auto c = rmsnormCandidate("  this is not cuda;", "broken");
    const auto e = s_rms->evaluate(c, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::CompileFailed);
    EXPECT_FALSE(e.compile.log.empty());
}

TEST_F(HarnessGpu, TraceReturnsCuptiRecordsMatchingTheLaunches)
{
    REQUIRE_GPU();
    auto& ev = *s_rms;
    ev.prepareWorker();
    const auto c = ev.templateCandidate({}, "trace");
    const auto m = ev.compileModule(c);
    ASSERT_TRUE(m->report.ok);
    const auto r = ev.client().request(
        { { "op", "trace" }, { "problem", "rmsnorm" }, { "candidate", ev.candidateRequest(c, *m) },
            { "shape", { { "dims", { { "T", 4096 }, { "H", 8192 } } } } }, { "launches", 20 } },
        60);
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.body.at("event_us").size(), 20u);
    if (r.body.value("cupti", false)) {
        int candidate = 0;
        for (const auto& rec : r.body.at("records"))
            candidate += rec.at("name").get<std::string>() == "rmsnorm_template";
        EXPECT_EQ(candidate, 20);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Isolation (issue 13): harness memory out of reach, checking and timing alike, per-output measured tolerances.

namespace {

// A kernel that counts its launches in a global (static rules off) and misbehaves only after `after` launches:
// verification runs far fewer, so only what the harness does while timing can catch it.
kl::Candidate lateCheat(const std::string& misbehave, const std::string& id, int after = 400)
{
    auto c = rmsnormCandidate("  const int calls = *(volatile int*)&g_calls;\n"
                              "  const bool late = calls > "
            + std::to_string(after) + ";\n" + misbehave
            + "\n  __syncthreads();\n"
              "  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(&g_calls, 1);",
        id);
    c.source = "__device__ int g_calls = 0;\n__device__ unsigned long long g_seen[4096];\n" + c.source;
    return c;
}

kl::GpuEvaluatorOptions noStatic()
{
    auto o = options();
    o.staticChecks = false; // the source and PTX rules would reject these cheats before the GPU sees them
    o.ptxChecks = false;
    return o;
}

// A problem with two outputs, a = 2x and b = 3x, written to a temporary folder.
std::filesystem::path twoOutputProblem()
{
    const auto dir = std::filesystem::temp_directory_path() / "kl-two-outputs";
    std::filesystem::create_directories(dir);
    auto write = [&](const char* name, const std::string& text) {
        std::FILE* f = std::fopen((dir / name).string().c_str(), "w");
        std::fputs(text.c_str(), f);
        std::fclose(f);
    };
    write("problem.json",
        R"({"name": "two_outputs", "description": "a = 2x, b = 3x in bf16: per-output judging", "tags": ["test"],
  "dims": [{"name": "N", "min": 1024, "max": 1048576, "multiple_of": 256, "log_uniform": true}],
  "dim_constraints": [], "scalars": [],
  "tensors": [{"name": "a", "dtype": "bf16", "shape": ["N"], "role": "output"},
              {"name": "b", "dtype": "bf16", "shape": ["N"], "role": "output"},
              {"name": "x", "dtype": "bf16", "shape": ["N"], "role": "input", "scale": 1.0}],
  "tuning_shapes": [{"dims": {"N": 65536}, "weight": 1}],
  "verify_shapes": [{"dims": {"N": 1024}}, {"dims": {"N": 262144}}],
  "tolerances": {"bf16": {"rel_l2": 0.01, "max_abs": 0.02}},
  "flops": "2*N", "bytes": "6*N",
  "reference": "reference.cu", "baseline": "baseline.cu", "template": "template.cu"})");
    auto kernel = [](const std::string& name, const std::string& bFactor) {
        return "#include <cuda_bf16.h>\n#ifndef KL_ACC\n#define KL_ACC float\n#endif\n"
               "// @kl:launch "
            + name + " grid=(ceil_div(N, 256)) block=(256) smem=0 args=(a, b, x, N)\nextern \"C\" __global__ void "
            + name
            + "(__nv_bfloat16* a, __nv_bfloat16* b, const __nv_bfloat16* x, int N) {\n"
              "  const int i = blockIdx.x * 256 + threadIdx.x;\n  if (i >= N) return;\n"
              "  const KL_ACC v = __bfloat162float(x[i]);\n"
              "  a[i] = __float2bfloat16_rn((float)(v * (KL_ACC)2));\n"
              "  b[i] = __float2bfloat16_rn((float)(v * (KL_ACC)"
            + bFactor + "));\n}\n";
    };
    write("reference.cu", kernel("two_ref", "3"));
    write("baseline.cu", kernel("two_base", "3"));
    write("template.cu", kernel("two_template", "3"));
    write("wrong_b.cu", kernel("two_wrong_b", "3.018"));
    return dir;
}

std::string readFile(const std::filesystem::path& p)
{
    std::FILE* f = std::fopen(p.string().c_str(), "rb");
    std::string s;
    char buf[4096];
    while (f && !std::feof(f))
        s.append(buf, std::fread(buf, 1, sizeof(buf), f));
    if (f)
        std::fclose(f);
    return s;
}

} // namespace

TEST_F(HarnessGpu, WriteBeyondTheGuardFaultsAndCostsOnlyTheWorker)
{
    REQUIRE_GPU();
    // 32 KiB past the last element: past every canary of the last set of the output slab, into unmapped space.
    auto c = rmsnormCandidate(std::string(kHonestWrite)
            + "\n  if (row == T - 1 && threadIdx.x == 0) y[(long long)T * H + 16384] = __float2bfloat16(1.f);",
        "beyond-guard");
    const auto e = s_rms->evaluate(c, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Crashed) << reasonsText(e);
    EXPECT_TRUE(hasRule(e, "worker.crashed")) << reasonsText(e);
    const auto ok = s_rms->evaluate(rmsnormCandidate(kHonestWrite, "honest"), quick(), kl::CancelToken {});
    EXPECT_EQ(ok.verdict, kl::Verdict::Correct) << reasonsText(ok);
}

TEST_F(HarnessGpu, ReadingNextToItsBuffersFindsNothingOfTheHarness)
{
    REQUIRE_GPU();
    // Copies what lies just past its input (canary words) and far past it (unmapped, or another candidate slab)
    // into its output: no reference value is anywhere it can reach, so this can only fail or fault.
    for (const char* offset : { "64", "(1 << 20)", "(64 << 20)" }) {
        auto c = rmsnormCandidate(std::string("  for (int i = threadIdx.x; i < H; i += 256)\n"
                                              "    y[row * H + i] = x[(long long)T * H + ")
                + offset + " + row * H + i];",
            std::string("neighbour-") + offset);
        const auto e = s_rms->evaluate(c, quick(), kl::CancelToken {});
        EXPECT_TRUE(e.verdict == kl::Verdict::Rejected || e.verdict == kl::Verdict::Crashed)
            << offset << ": " << reasonsText(e);
    }
}

TEST_F(HarnessGpu, TimedLaunchesThatSkipTheirWritesAreCaught)
{
    REQUIRE_GPU();
    kl::GpuEvaluator ev(problem("rmsnorm"), noStatic());
    const auto c = lateCheat("  if (late && (calls & 1)) return;\n" + std::string(kHonestWrite), "skip-some");
    const auto e = ev.evaluate(c, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected) << reasonsText(e);
    EXPECT_TRUE(hasRule(e, "dynamic.timed-output-wrong")) << reasonsText(e);
}

TEST_F(HarnessGpu, TimedStaleOutputsFailTheRecheck)
{
    REQUIRE_GPU();
    kl::GpuEvaluator ev(problem("rmsnorm"), noStatic());
    // After verification: compute each input pointer's result once, then leave whatever the output holds (a result
    // from an earlier visit, were outputs not poisoned and rotated against the inputs).
    const auto c = lateCheat("  if (late) {\n"
                             "    const unsigned long long key = (unsigned long long)x;\n"
                             "    const unsigned slot = (unsigned)((key >> 8) * 2654435761u) % 4096u;\n"
                             "    if (g_seen[slot] == key) return;\n"
                             "    __syncthreads();\n"
                             "    if (row == T - 1 && threadIdx.x == 0) g_seen[slot] = key;\n"
                             "  }\n"
            + std::string(kHonestWrite),
        "stale");
    const auto e = ev.evaluate(c, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected) << reasonsText(e);
    EXPECT_TRUE(hasRule(e, "dynamic.timed-output-wrong")) << reasonsText(e);
}

TEST_F(HarnessGpu, InputsWrittenDuringTimingAreCaughtByThePostTimingHash)
{
    REQUIRE_GPU();
    kl::GpuEvaluator ev(problem("rmsnorm"), noStatic());
    const auto c = lateCheat(std::string(kHonestWrite)
            + "\n  __syncthreads();\n  if (late && threadIdx.x == 0) x[row * H + 1] = __float2bfloat16(0.f);",
        "mutate-late");
    const auto e = ev.evaluate(c, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected) << reasonsText(e);
    EXPECT_TRUE(hasRule(e, "dynamic.input-modified")) << reasonsText(e);
}

TEST_F(HarnessGpu, OneWrongOutputAmongSeveralIsJudgedAlone)
{
    REQUIRE_GPU();
    const auto dir = twoOutputProblem();
    const kl::Problem p = kl::loadProblem(dir.string());
    kl::GpuEvaluator ev(p, noStatic());
    const auto honest = ev.evaluate(ev.templateCandidate({}, "honest"), quick(), kl::CancelToken {});
    EXPECT_EQ(honest.verdict, kl::Verdict::Correct) << reasonsText(honest);
    // b is 0.6% off, a exact. Pooled into one statistic (0.6% x 3 / sqrt(2^2 + 3^2) = 0.50%) under the stated 1%
    // it would pass; judged alone (0.60%) against its measured tolerance (the bf16 rounding floor 0.39%, since the
    // fp32 reference is exact here) it fails.
    kl::Candidate wrong;
    wrong.id = "wrong-b";
    wrong.source = readFile(dir / "wrong_b.cu");
    const auto e = ev.evaluate(wrong, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected) << reasonsText(e);
    ASSERT_TRUE(hasRule(e, "correctness.rel-l2")) << reasonsText(e);
    double worst = 0;
    for (const auto& sh : e.shapes)
        for (const auto& c : sh.checks)
            if (!c.passed)
                worst = std::max(worst, c.relL2);
    EXPECT_GT(worst, 0.0055) << "b's own error, not diluted by a";
    EXPECT_LT(worst, 0.01) << "within the stated tolerance: only the measured one catches it";
}

TEST_F(HarnessGpu, LoadProblemReportsMeasuredTolerances)
{
    REQUIRE_GPU();
    auto& ev = *s_rms;
    ev.prepareWorker();
    const kl::Problem p = problem("rmsnorm");
    const auto dir = std::filesystem::path(KL_SOURCE_DIR) / "kernels/problems/rmsnorm";
    const auto r = ev.client().request({ { "op", "load_problem" }, { "problem_json", kl::toJson(p) },
                                           { "reference_source", readFile(dir / "reference.cu") },
                                           { "baseline_source", readFile(dir / "baseline.cu") } },
        120);
    ASSERT_TRUE(r.ok()) << r.error;
    const auto t = kl::wire::outputTolerance(r.body.at("tolerances").at("y"), "tolerances.y");
    std::printf("rmsnorm y: fp32 vs fp64 rel_l2 %.3g max %.3g -> tolerance %.3g / %.3g (stated %.3g / %.3g)\n",
        t.measuredRelL2, t.measuredMaxAbs, t.tolerance.relL2, t.tolerance.maxAbs, t.stated.relL2, t.stated.maxAbs);
    EXPECT_GE(t.measuredRelL2, 0);
    EXPECT_LE(t.tolerance.relL2, t.stated.relL2);
    EXPECT_LE(t.tolerance.maxAbs, t.stated.maxAbs);
    EXPECT_GE(t.tolerance.relL2, kl::roundingFloor(kl::DType::BF16).relL2);
    EXPECT_LT(t.tolerance.relL2, t.stated.relL2) << "the measured budget is tighter than the stated 1%";
}

namespace {
kl::Candidate pagedGatherCandidate(const std::string& sumLoop, const std::string& id)
{
    kl::Candidate c;
    c.id = id;
    c.source = "// @kl:launch g grid=(B) block=(64) smem=0 args=(out, rows, perm, lens, N, D, scale)\n"
               "extern \"C\" __global__ void g(float* out, const float* rows, const int* perm, const int* lens,\n"
               "                               int N, int D, float scale) {\n"
               "  const int b = blockIdx.x, d = threadIdx.x;\n"
               "  float acc = 0.f;\n"
        + sumLoop
        + "\n  out[(long long)b * D + d] = acc * scale;\n"
          "}\n";
    return c;
}
} // namespace

// Integer inputs with meaning (a permutation and ragged lengths with both extremes), a constant dim and a scalar
// computed from it: an honest kernel passes on every check; one that ignores the lengths or the permutation
// is wrong, which rint(normal) integers could not show (they index outside the tensors).
TEST_F(HarnessGpu, IntegerInputsWithMeaningJudgeAPagedGather)
{
    REQUIRE_GPU();
    const kl::Problem p = kl::loadProblem(std::string(KL_SOURCE_DIR) + "/tests/kernels/problems/paged_gather");
    auto o = options();
    o.staticChecks = false;
    kl::GpuEvaluator ev(p, o);
    const auto honest = ev.evaluate(
        pagedGatherCandidate("  for (int j = 0; j < lens[b]; ++j) acc += rows[(long long)perm[j] * D + d];", "honest"),
        quick(), kl::CancelToken {});
    EXPECT_TRUE(honest.correctEverywhere()) << reasonsText(honest);
    EXPECT_FALSE(hasRule(honest, "correctness.rel-l2")) << reasonsText(honest);
    for (const auto& [loop, id] : {
             std::pair { "  for (int j = 0; j < N; ++j) acc += rows[(long long)perm[j] * D + d];", "all-rows" },
             std::pair { "  for (int j = 0; j < lens[b]; ++j) acc += rows[(long long)j * D + d];", "no-perm" },
             std::pair { "  for (int j = 0; j < lens[0]; ++j) acc += rows[(long long)perm[j] * D + d];", "one-len" },
         }) {
        const auto e = ev.evaluate(pagedGatherCandidate(loop, id), quick(), kl::CancelToken {});
        EXPECT_EQ(e.verdict, kl::Verdict::Rejected) << id << ": " << reasonsText(e);
        EXPECT_FALSE(e.correctEverywhere()) << id << ": " << reasonsText(e);
    }
}

// In-place tensors (fused_add_rmsnorm's x and residual) are judged as outputs: writing them is not an input
// modification, and leaving one as it was is a wrong result named by that tensor.
TEST_F(HarnessGpu, InPlaceTensorsAreJudgedAsOutputsNotHashedAsInputs)
{
    REQUIRE_GPU();
    kl::GpuEvaluator ev(problem("fused_add_rmsnorm"), options());
    const auto honest = ev.evaluate(ev.templateCandidate({}, "honest"), quick(), kl::CancelToken {});
    EXPECT_EQ(honest.verdict, kl::Verdict::Correct) << reasonsText(honest);
    EXPECT_FALSE(hasRule(honest, "dynamic.input-modified")) << reasonsText(honest);
    EXPECT_GT(honest.shapes.front().checks.size(), 0u);
    kl::Candidate unchanged;
    unchanged.id = "residual-unchanged";
    unchanged.source = readFile(std::filesystem::path(KL_SOURCE_DIR)
        / "tests/redteam/corpus/cheat/fused_add_rmsnorm_residual_left_unchanged.cu");
    const auto e = ev.evaluate(unchanged, quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected) << reasonsText(e);
    EXPECT_TRUE(hasRule(e, "correctness.rel-l2")) << reasonsText(e);
    EXPECT_FALSE(hasRule(e, "dynamic.input-modified")) << reasonsText(e);
    EXPECT_TRUE(std::any_of(e.reasons.begin(), e.reasons.end(),
        [](const kl::VerdictReason& r) { return r.message.find("residual") != std::string::npos; }))
        << "the reason names the in-place tensor: " << reasonsText(e);
}
