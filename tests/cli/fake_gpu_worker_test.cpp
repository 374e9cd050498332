// The test double kl_test_fake_worker, spoken to by the product's own WorkerClient: the tests that drive
// kloop through it rely on these rules (fake_gpu_worker.cpp), so they are checked here one by one.
#include "core/json_io.h"
#include "core/session_store.h"
#include "kernels/nvrtc_compiler.h"
#include "kernels/worker_client.h"
#include "kernels/worker_protocol.h"

#include <filesystem>
#include <gtest/gtest.h>

namespace fs = std::filesystem;
using namespace kl;
using nlohmann::json;

namespace {

struct FakeGpuWorker : ::testing::Test {
    Problem problem = loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/rmsnorm");
    std::string templateSource = readFile(fs::path(problem.folder) / problem.templateFile);
    std::string baselineSource = readFile(fs::path(problem.folder) / problem.baselineFile);
    WorkerClient client { WorkerOptions { { KL_FAKE_WORKER_PATH }, {}, 30, {} } };

    void SetUp() override
    {
        const auto r = client.addSetup({ { "op", "load_problem" }, { "problem_json", toJson(problem) },
            { "reference_source", readFile(fs::path(problem.folder) / problem.referenceFile) },
            { "baseline_source", baselineSource } });
        ASSERT_TRUE(r.ok()) << r.error;
        client.ensureStarted();
    }

    static json candidate(const std::string& source, const ParamValues& params = {})
    {
        return { { "source", source }, { "params", wire::toJson(params) } };
    }
    json shapes() const
    {
        json out = json::array();
        for (const auto& s : problem.tuningShapes)
            out.push_back({ { "dims", s.dims }, { "weight", s.weight } });
        return out;
    }
    WorkerClient::Reply time(const std::string& source)
    {
        return client.request({ { "op", "time" }, { "problem", problem.name }, { "candidate", candidate(source) },
                                  { "shapes", shapes() }, { "baseline", true } },
            30);
    }
};

std::string withMarker(const std::string& source, const std::string& marker)
{
    return "// " + marker + "\n" + source;
}

} // namespace

TEST_F(FakeGpuWorker, SaysItIsATestDoubleAndTargetsARealArchitecture)
{
    const DeviceInfo& d = client.device();
    EXPECT_EQ(d.name, "test double (no GPU)");
    EXPECT_EQ(d.arch, "sm_90a");
    EXPECT_EQ(d.nvrtcVersion, nvrtcVersionString());
    const auto trace = client.request({ { "op", "trace" }, { "problem", problem.name },
                                          { "candidate", candidate(templateSource) }, { "shape", shapes()[0] } },
        30);
    EXPECT_EQ(trace.status, WorkerClient::Status::Error);
    EXPECT_NE(trace.error.find("no kernel records"), std::string::npos) << trace.error;
}

TEST_F(FakeGpuWorker, CompilesWithNvrtc)
{
    const auto good = client.request({ { "op", "compile" }, { "candidate", candidate(templateSource) } }, 60);
    ASSERT_TRUE(good.ok()) << good.error;
    const CompileReport report = wire::compileReport(good.body.at("report"));
    EXPECT_TRUE(report.ok) << report.log;
    ASSERT_EQ(report.kernels.size(), 1u);
    EXPECT_GT(report.kernels[0].registers, 0);
    EXPECT_EQ(good.body.value("key", "").size(), 64u);

    std::string broken = templateSource;
    broken.replace(broken.find("rsqrtf("), 7, "no_such_function(");
    const auto bad = client.request({ { "op", "compile" }, { "candidate", candidate(broken) } }, 60);
    ASSERT_TRUE(bad.ok()) << bad.error;
    const CompileReport badReport = wire::compileReport(bad.body.at("report"));
    EXPECT_FALSE(badReport.ok);
    EXPECT_NE(badReport.log.find("no_such_function"), std::string::npos) << badReport.log;

    // verify/time without a CUBIN compile the source; one that does not compile gets no shapes, as from the
    // real worker.
    const auto verify = client.request(
        { { "op", "verify" }, { "problem", problem.name }, { "candidate", candidate(broken) }, { "shapes", shapes() } },
        60);
    ASSERT_TRUE(verify.ok()) << verify.error;
    EXPECT_FALSE(verify.body.contains("shapes"));
    EXPECT_FALSE(wire::compileReport(verify.body.at("compile")).ok);
}

TEST_F(FakeGpuWorker, RefusesACubinThatIsNotOne)
{
    json c = candidate(templateSource);
    c["cubin_b64"] = wire::base64Encode("not an ELF image");
    const auto r = client.request(
        { { "op", "verify" }, { "problem", problem.name }, { "candidate", c }, { "shapes", shapes() } }, 30);
    EXPECT_EQ(r.status, WorkerClient::Status::Error);
    EXPECT_NE(r.error.find("not an ELF image"), std::string::npos) << r.error;
}

TEST_F(FakeGpuWorker, VerifiesByTheWrongResultsMarker)
{
    for (const bool wrong : { false, true }) {
        const std::string source = wrong ? withMarker(templateSource, "kl-test-double: wrong-results") : templateSource;
        const auto r = client.request({ { "op", "verify" }, { "problem", problem.name },
                                          { "candidate", candidate(source) }, { "shapes", shapes() } },
            60);
        ASSERT_TRUE(r.ok()) << r.error;
        ASSERT_EQ(r.body.at("shapes").size(), problem.tuningShapes.size());
        for (const auto& s : r.body.at("shapes")) {
            const ShapeResult sr = wire::shapeResult(s);
            EXPECT_EQ(sr.correct, !wrong);
            ASSERT_EQ(sr.checks.size(), 1u);
            EXPECT_EQ(sr.checks[0].passed, !wrong);
            EXPECT_EQ(sr.checks[0].relL2 > problem.tolerances.at(DType::BF16).relL2, wrong);
        }
    }
}

TEST_F(FakeGpuWorker, TimesDeterministicallyFromEfficiency)
{
    auto speedups = [&](const std::string& source) {
        const auto r = time(source);
        EXPECT_TRUE(r.ok()) << r.error;
        std::vector<ShapeResult> out;
        for (const auto& s : r.body.value("shapes", json::array()))
            out.push_back(wire::shapeResult(s));
        EXPECT_EQ(out.size(), problem.tuningShapes.size());
        return out;
    };
    // The baseline against itself: 1.0, with an interval around it.
    for (const ShapeResult& s : speedups(baselineSource)) {
        EXPECT_DOUBLE_EQ(s.speedup, 1.0);
        EXPECT_LT(s.speedupCiLow, 1.0);
        EXPECT_GT(s.speedupCiHigh, 1.0);
    }
    // Same request, same numbers; the template's hash-derived efficiency lies in [0.45, 0.85).
    const auto first = speedups(templateSource);
    const auto again = speedups(templateSource);
    const auto marked = speedups(withMarker(templateSource, "kl-test-double: efficiency=0.90"));
    ASSERT_EQ(first.size(), again.size());
    for (std::size_t i = 0; i < first.size(); ++i) {
        EXPECT_EQ(first[i].timing->medianUs, again[i].timing->medianUs);
        EXPECT_GT(first[i].speedup, 1.0);
        EXPECT_LT(first[i].speedupCiHigh, marked[i].speedupCiLow) << first[i].shape.label();
        // Memory-bound model: a larger shape takes longer.
        if (i > 0
            && problem.tuningShapes[i].dims.at("T") * problem.tuningShapes[i].dims.at("H")
                > problem.tuningShapes[i - 1].dims.at("T") * problem.tuningShapes[i - 1].dims.at("H")) {
            EXPECT_GT(first[i].timing->medianUs, first[i - 1].timing->medianUs);
        }
    }
    const auto bad = time(withMarker(templateSource, "kl-test-double: efficiency=7"));
    EXPECT_EQ(bad.status, WorkerClient::Status::Error);
}

// The profile op (kloop profile --sol): each plan's kernels from its launch lines, the time op's latency split
// over them, counters from bytes/time; the request's switches and the no-counters marker.
TEST_F(FakeGpuWorker, ProfilesEachPlansKernelsFromTheTimingModel)
{
    const std::string twoKernels
        = "// kl-test-double: efficiency=0.5\n"
          "#include <cuda_bf16.h>\n"
          "// @kl:launch k_a grid=(T) block=(128) smem=0 args=(y, x, w, T, H, eps)\n"
          "// @kl:launch k_b grid=(ceil_div(T, 4)) block=(64) smem=0 args=(y, x, w, T, H, eps)\n"
          "extern \"C\" __global__ void k_a(__nv_bfloat16* y, const __nv_bfloat16* x, "
          "const __nv_bfloat16* w, int T, int H, float eps) {}\n"
          "extern \"C\" __global__ void k_b(__nv_bfloat16* y, const __nv_bfloat16* x, "
          "const __nv_bfloat16* w, int T, int H, float eps) {}\n";
    const json shape = { { "dims", { { "T", 256 }, { "H", 8192 } } } };
    auto profile = [&](const std::string& source, bool sol, bool trace) {
        const auto r
            = client.request({ { "op", "profile" }, { "problem", problem.name }, { "candidate", candidate(source) },
                                 { "shape", shape }, { "sol", sol }, { "trace", trace }, { "launches", 3 } },
                60);
        EXPECT_TRUE(r.ok()) << r.error;
        return wire::profileReport(r.body, "profile reply");
    };
    const double bytes = 4.0 * 256 * 8192 + 2.0 * 8192;
    const ProfileReport r = profile(twoKernels, true, true);
    EXPECT_TRUE(r.compile.ok) << r.compile.log;
    EXPECT_TRUE(r.traceAvailable);
    ASSERT_EQ(r.plans.size(), 2u);
    const PlanProfile& base = r.plans[0];
    const PlanProfile& cand = r.plans[1];
    EXPECT_EQ(base.role, "baseline");
    EXPECT_EQ(cand.role, "candidate");
    ASSERT_EQ(base.kernelsPerRun, 1);
    ASSERT_EQ(base.records.size(), 3u);
    ASSERT_EQ(cand.kernelsPerRun, 2);
    ASSERT_EQ(cand.records.size(), 6u);
    EXPECT_EQ(base.records[0].name, "rmsnorm_baseline");
    for (std::size_t i = 0; i < cand.records.size(); ++i) {
        const KernelRecord& k = cand.records[i];
        EXPECT_EQ(k.name, i % 2 ? "k_b" : "k_a");
        EXPECT_EQ(k.grid[0], i % 2 ? 64 : 256);
        EXPECT_EQ(k.block[0], i % 2 ? 64 : 128);
        // Half of 0.5 us + bytes / (4 TB/s * 0.5) each.
        EXPECT_NEAR(static_cast<double>(k.endNs - k.startNs), (0.5 + bytes / 2e12 * 1e6) / 2 * 1e3, 1.0);
        if (i > 0) {
            EXPECT_GT(k.startNs, cand.records[i - 1].endNs);
        }
    }
    EXPECT_GT(cand.records[0].startNs, base.records.back().endNs);
    EXPECT_NEAR(
        static_cast<double>(base.records[0].endNs - base.records[0].startNs), (0.5 + bytes / 1.2e12 * 1e6) * 1e3, 1.0);
    ASSERT_EQ(cand.eventUs.size(), 3u);
    EXPECT_GT(cand.eventUs[0], 0.5 + bytes / 2e12 * 1e6);
    ASSERT_TRUE(cand.solAvailable);
    ASSERT_EQ(cand.sol.size(), 2u);
    for (const SolCounters& k : cand.sol) {
        EXPECT_NEAR(k.dramBytes, bytes / 2, 1e-6);
        EXPECT_NEAR(k.dramThroughputPct, k.dramBytes / (k.durationNs * 1e-9) / 4e12 * 100, 1e-9);
    }

    const ProfileReport bare = profile(twoKernels, false, false);
    ASSERT_EQ(bare.plans.size(), 2u);
    EXPECT_FALSE(bare.traceAvailable);
    EXPECT_EQ(bare.traceNote, "not requested");
    EXPECT_TRUE(bare.plans[1].records.empty());
    EXPECT_EQ(bare.plans[1].eventUs.size(), 3u) << "CUDA-event times come without kernel records";
    EXPECT_FALSE(bare.plans[1].solAvailable);
    EXPECT_EQ(bare.plans[1].solNote, "not requested");

    const ProfileReport noCounters = profile(withMarker(twoKernels, "kl-test-double: no-counters"), true, true);
    ASSERT_EQ(noCounters.plans.size(), 2u);
    for (const PlanProfile& p : noCounters.plans) {
        EXPECT_FALSE(p.solAvailable) << p.role;
        EXPECT_TRUE(p.sol.empty()) << p.role;
        EXPECT_NE(p.solNote.find("kl-test-double: no-counters"), std::string::npos) << p.solNote;
        EXPECT_FALSE(p.records.empty()) << p.role << ": records stay, as on a GPU without counter permission";
    }
}
