// The worker's profile op on a real GPU: the rmsnorm template against its baseline, traced and under CUPTI's range
// profiler, and the same op in a worker whose CUPTI is switched off, which must say so instead of failing.
#include "core/candidate.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "kernels/gpu_evaluator.h"
#include "kernels/plan_profile.h"
#include "tests/support/gpu_available.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <gtest/gtest.h>

namespace {

kl::GpuEvaluatorOptions options()
{
    kl::GpuEvaluatorOptions o;
    o.compileCacheDir = std::filesystem::temp_directory_path() / "kl-gpu-test-cache";
    if (const char* w = std::getenv("KL_WORKER"))
        o.worker.command = { w };
    return o;
}

kl::Problem rmsnorm()
{
    return kl::loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/rmsnorm");
}

kl::Shape shape(std::int64_t t, std::int64_t h)
{
    kl::Shape s;
    s.dims = { { "T", t }, { "H", h } };
    return s;
}

void expectTraced(const kl::PlanProfile& p, int launches)
{
    EXPECT_EQ(p.launches, launches) << p.role;
    ASSERT_GE(p.kernelsPerRun, 1) << p.role;
    EXPECT_EQ(p.records.size(), static_cast<std::size_t>(launches * p.kernelsPerRun)) << p.role;
    EXPECT_EQ(p.eventUs.size(), static_cast<std::size_t>(launches)) << p.role;
    for (std::size_t i = 0; i < p.records.size(); ++i) {
        EXPECT_GT(p.records[i].endNs, p.records[i].startNs) << p.role << " record " << i;
        if (i > 0) {
            EXPECT_GE(p.records[i].startNs, p.records[i - 1].startNs) << p.role << " records in launch order";
        }
    }
}

TEST(ProfileGpu, RmsnormTemplateAgainstBaselineAtTheDramCeiling)
{
    REQUIRE_GPU();
    kl::GpuEvaluator ev(rmsnorm(), options());
    const kl::Candidate c = ev.templateCandidate({}, "template");
    const std::int64_t T = 16384, H = 8192;
    kl::ProfileRequest req;
    req.launches = 4;
    const kl::ProfileReport r = kl::profileAgainstBaseline(ev, c, shape(T, H), req);
    ASSERT_TRUE(r.compile.ok) << r.compile.log;
    EXPECT_EQ(r.shape, shape(T, H));
    const kl::PlanProfile* base = r.plan("baseline");
    const kl::PlanProfile* cand = r.plan("candidate");
    ASSERT_TRUE(base && cand);
    if (r.traceAvailable) {
        expectTraced(*base, 4);
        expectTraced(*cand, 4);
        bool sawTemplate = false;
        for (const auto& k : cand->records)
            sawTemplate = sawTemplate || k.name.find("rmsnorm_template") != std::string::npos;
        EXPECT_TRUE(sawTemplate) << "the candidate's row shows the candidate's kernel";
        EXPECT_NE(base->records.front().name, cand->records.front().name) << "two different plans";
    } else {
        EXPECT_FALSE(r.traceNote.empty());
        std::printf("trace unavailable: %s\n", r.traceNote.c_str());
    }
    // rmsnorm moves at least 4*T*H bytes (x read, y written, bf16): 512 MiB at this shape.
    const double minBytes = 4.0 * static_cast<double>(T * H);
    for (const kl::PlanProfile* p : { base, cand }) {
        if (!p->solAvailable) {
            EXPECT_FALSE(p->solNote.empty()) << p->role << ": counters missing without a reason";
            std::printf("%s: counters unavailable: %s\n", p->role.c_str(), p->solNote.c_str());
            continue;
        }
        ASSERT_FALSE(p->sol.empty()) << p->role;
        EXPECT_GE(p->solPasses, 1);
        if (p->kernelsPerRun > 0) {
            EXPECT_EQ(p->sol.size(), static_cast<std::size_t>(p->kernelsPerRun)) << p->role;
        }
        double bytes = 0, ns = 0;
        for (const auto& k : p->sol) {
            std::printf("%s %-28s %9.1f us DRAM %5.1f%% SM %5.1f%% occupancy %5.1f%% DRAM bytes %.3e\n",
                p->role.c_str(), k.name.c_str(), k.durationNs / 1e3, k.dramThroughputPct, k.smThroughputPct,
                k.achievedOccupancyPct, k.dramBytes);
            EXPECT_GT(k.durationNs, 0);
            EXPECT_GE(k.smThroughputPct, 0);
            EXPECT_LE(k.smThroughputPct, 100.5);
            EXPECT_GT(k.achievedOccupancyPct, 0);
            EXPECT_LE(k.achievedOccupancyPct, 100.5);
            EXPECT_LE(k.dramThroughputPct, 100.5);
            bytes += k.dramBytes;
            ns += k.durationNs;
        }
        // The counters' bytes agree with the problem's own byte count (what the roofline uses): up to the 60 MiB
        // the L2 may still hold of x or y below it, up to a second read of x above it.
        EXPECT_GT(bytes, 0.75 * minBytes) << p->role;
        EXPECT_LT(bytes, 2.1 * minBytes) << p->role;
        if (p == cand) {
            EXPECT_GT(p->sol.front().dramThroughputPct, 30.0) << "a streaming kernel on 512 MiB keeps DRAM busy";
            // The throughput % and the bytes/time agree: 4.8 TB/s is the H200's DRAM peak.
            std::printf("candidate: %.2f TB/s from bytes/duration\n", bytes / ns * 1e-3);
        }
    }
}

TEST(ProfileGpu, WithoutCuptiTheWorkerSaysWhyAndStillRunsThePlans)
{
    REQUIRE_GPU();
    kl::GpuEvaluatorOptions o = options();
    o.worker.environment.push_back({ "KL_NO_CUPTI", "1" });
    kl::GpuEvaluator ev(rmsnorm(), o);
    const kl::ProfileReport r = kl::profileAgainstBaseline(ev, ev.templateCandidate({}, "template"), shape(256, 4096));
    ASSERT_TRUE(r.compile.ok) << r.compile.log;
    EXPECT_FALSE(r.traceAvailable);
    EXPECT_NE(r.traceNote.find("KL_NO_CUPTI"), std::string::npos) << r.traceNote;
    ASSERT_EQ(r.plans.size(), 2u);
    for (const auto& p : r.plans) {
        EXPECT_FALSE(p.solAvailable) << p.role;
        EXPECT_NE(p.solNote.find("KL_NO_CUPTI"), std::string::npos) << p.role << ": " << p.solNote;
        EXPECT_TRUE(p.sol.empty());
        EXPECT_TRUE(p.records.empty());
        EXPECT_EQ(p.eventUs.size(), 5u) << p.role << ": the runs still happen, timed by CUDA events";
    }
}

TEST(ProfileGpu, AShapeOutsideTheProblemIsAnInputError)
{
    REQUIRE_GPU();
    kl::GpuEvaluator ev(rmsnorm(), options());
    EXPECT_THROW(kl::profileAgainstBaseline(ev, ev.templateCandidate({}, "template"), shape(16, 1000)), kl::InputError);
}

} // namespace
