// The referee in the real pipeline (kl::GpuEvaluator) on a machine without a GPU: NVRTC compiles for real,
// kl_test_fake_worker (a TEST DOUBLE speaking the worker protocol, tests/cli/fake_gpu_worker.cpp) stands in
// for the GPU. Shows that the PTX rules reject before anything runs, that the switch the GPU red-team run
// uses turns them off, and that the session's current best reaches the physics rules.
#include "core/kernel_spec.h"
#include "kernels/gpu_evaluator.h"
#include "tests/redteam/corpus.h"

#include <algorithm>
#include <gtest/gtest.h>

namespace {

kl::GpuEvaluatorOptions fakeWorkerOptions()
{
    kl::GpuEvaluatorOptions o;
    o.worker.command = { KL_FAKE_WORKER_PATH };
    o.arch = "sm_90a";
    o.compileCacheDir.clear(); // memory only
    o.compileThreads = 1;
    return o;
}

kl::Candidate corpusCandidate(const std::string& file)
{
    kl::redteam::CorpusCase c;
    c.file = file;
    kl::Candidate cand;
    cand.id = "case";
    cand.source = c.source();
    cand.params = kl::parseKernelSpec(cand.source).defaults();
    return cand;
}

kl::EvaluateOptions quick()
{
    kl::EvaluateOptions opt;
    opt.maxSecondsPerShape = 0.05;
    opt.heldOutCount = 1;
    opt.seed = 7;
    return opt;
}

bool hasRule(const kl::Evaluation& e, const std::string& rule)
{
    return std::any_of(e.reasons.begin(), e.reasons.end(), [&](const kl::VerdictReason& r) { return r.rule == rule; });
}

std::string reasons(const kl::Evaluation& e)
{
    std::string s = kl::verdictName(e.verdict);
    for (const auto& r : e.reasons)
        s += "\n  " + r.rule + ": " + r.message;
    return s;
}

TEST(RefereePipeline, PtxRulesRejectBeforeAnythingRunsAndCanBeSwitchedOff)
{
    const kl::Candidate cheat = corpusCandidate("corpus/cheat/rmsnorm_namespace_scope_counter.cu");
    kl::GpuEvaluator guarded(kl::redteam::corpusProblem("rmsnorm"), fakeWorkerOptions());
    const kl::Evaluation rejected = guarded.evaluate(cheat, quick(), kl::CancelToken {});
    EXPECT_EQ(rejected.verdict, kl::Verdict::Rejected) << reasons(rejected);
    EXPECT_TRUE(hasRule(rejected, "ptx.mutable-global")) << reasons(rejected);
    EXPECT_TRUE(rejected.shapes.empty()) << "compiled, never verified";
    EXPECT_TRUE(rejected.compile.ok);

    auto off = fakeWorkerOptions();
    off.staticChecks = false;
    off.ptxChecks = false;
    kl::GpuEvaluator open(kl::redteam::corpusProblem("rmsnorm"), off);
    const kl::Evaluation ran = open.evaluate(cheat, quick(), kl::CancelToken {});
    EXPECT_FALSE(hasRule(ran, "ptx.mutable-global")) << reasons(ran);
    EXPECT_FALSE(ran.shapes.empty()) << "with the static layers off the (fake) GPU judges it";
}

TEST(RefereePipeline, TheCurrentBestReachesThePhysicsRules)
{
    kl::GpuEvaluator ev(kl::redteam::corpusProblem("rmsnorm"), fakeWorkerOptions());
    kl::Candidate fast = ev.templateCandidate({}, "fast");
    fast.source += "\n// kl-test-double: efficiency=0.9\n"; // the double times it at ~3x the naive baseline
    const kl::Evaluation alone = ev.evaluate(fast, quick(), kl::CancelToken {});
    ASSERT_GT(alone.objective, 2.0) << reasons(alone);
    EXPECT_FALSE(hasRule(alone, "physics.suspicious-jump")) << "no best yet: " << reasons(alone);

    kl::EvaluateOptions opt = quick();
    opt.best = kl::CurrentBest {};
    opt.best->objective = 1.0;
    opt.best->reviewJumpFactor = 2.0;
    const kl::Evaluation judged = ev.evaluate(fast, opt, kl::CancelToken {});
    EXPECT_TRUE(hasRule(judged, "physics.suspicious-jump")) << reasons(judged);
    EXPECT_EQ(judged.verdict, kl::Verdict::PendingReview) << reasons(judged);

    opt.best->reviewJumpFactor = 10.0; // the session's factor, not a constant
    EXPECT_FALSE(hasRule(ev.evaluate(fast, opt, kl::CancelToken {}), "physics.suspicious-jump"));
}

} // namespace
