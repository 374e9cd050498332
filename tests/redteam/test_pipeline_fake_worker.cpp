// The referee in the real pipeline (kl::GpuEvaluator) on a machine without a GPU: NVRTC compiles for real,
// kl_test_fake_worker (a TEST DOUBLE speaking the worker protocol, tests/cli/fake_gpu_worker.cpp) stands in
// for the GPU. Shows that the PTX rules reject before anything runs, that the switch the GPU red-team run
// uses turns them off, and that the session's current best reaches the physics rules.
#include "core/kernel_spec.h"
#include "kernels/gpu_evaluator.h"
#include "tests/redteam/corpus.h"

#include <algorithm>
#include <cstdio>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

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

// The PTX rules that depend on how the plan launches a kernel get the plan: a pdl=1 kernel without its wait is
// rejected before it races anything, its honest twin runs.
TEST(RefereePipeline, TheLaunchPlanReachesThePtxRules)
{
    kl::GpuEvaluator evaluator(kl::redteam::corpusProblem("gemm_bf16"), fakeWorkerOptions());
    const kl::Evaluation race = evaluator.evaluate(
        corpusCandidate("corpus/cheat/gemm_bf16_splitk_reduce_loads_before_wait.cu"), quick(), kl::CancelToken {});
    EXPECT_EQ(race.verdict, kl::Verdict::Rejected) << reasons(race);
    EXPECT_TRUE(hasRule(race, "ptx.pdl-without-wait")) << reasons(race);
    EXPECT_TRUE(race.shapes.empty()) << "compiled, never verified";
    const kl::Evaluation honest = evaluator.evaluate(
        corpusCandidate("corpus/honest/gemm_bf16_split_k_pdl_reduce.cu"), quick(), kl::CancelToken {});
    EXPECT_FALSE(hasRule(honest, "ptx.pdl-without-wait")) << reasons(honest);
    EXPECT_FALSE(honest.shapes.empty()) << reasons(honest);
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

TEST(RefereePipeline, AScreenVerifiesAndTimesOnlyItsShapesAndLeavesTheRestToTheFullProtocol)
{
    kl::GpuEvaluator ev(kl::redteam::corpusProblem("rmsnorm"), fakeWorkerOptions());
    const kl::Candidate c = ev.templateCandidate({}, "screened");
    const std::vector<kl::Shape>& tuning = ev.problem().tuningShapes;
    ASSERT_GE(tuning.size(), 3u);
    kl::EvaluateOptions opt = quick();
    opt.fidelity = kl::Fidelity { 3, 2 };
    const kl::Evaluation screen = ev.evaluate(c, opt, kl::CancelToken {});
    EXPECT_EQ(screen.fidelity, opt.fidelity);
    EXPECT_GT(screen.deviceMs, 0);
    std::vector<kl::Shape> verified, timed;
    for (const kl::ShapeResult& s : screen.shapes) {
        EXPECT_FALSE(s.heldOut) << s.shape.label();
        verified.push_back(s.shape);
        if (s.timing) {
            timed.push_back(s.shape);
            EXPECT_EQ(s.timing->samples, 3) << s.shape.label();
        }
    }
    EXPECT_EQ(timed, (std::vector<kl::Shape> { tuning.front(), tuning.back() }));
    EXPECT_EQ(verified, timed);
    EXPECT_GT(screen.objective, 0) << reasons(screen);

    const kl::Evaluation full = ev.evaluate(c, quick(), kl::CancelToken {});
    EXPECT_FALSE(full.fidelity.screen());
    EXPECT_TRUE(std::any_of(full.shapes.begin(), full.shapes.end(), [](const auto& s) { return s.heldOut; }));
    EXPECT_GT(std::count_if(full.shapes.begin(), full.shapes.end(), [](const auto& s) { return !s.heldOut; }),
        static_cast<std::ptrdiff_t>(timed.size()));
    EXPECT_EQ(std::count_if(full.shapes.begin(), full.shapes.end(), [](const auto& s) { return s.timing.has_value(); }),
        static_cast<std::ptrdiff_t>(tuning.size()));
}

} // namespace

namespace {

// kloop eval --compile-only needs no GPU and reports the referee's static layers, so agents and CI see a
// ptx.* rejection before any device time is spent.
std::string run(const std::string& command, int* status)
{
    std::string out;
    FILE* p = ::popen(command.c_str(), "r");
    if (!p)
        return out;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p))
        out.append(buf, n);
    *status = ::pclose(p);
    return out;
}

TEST(RefereePipeline, CompileOnlyEvalReportsThePtxRules)
{
    const std::string kloop = KLOOP_PATH;
    int status = 0;
    const std::string cheat = kl::redteam::redteamDir() + "/corpus/cheat/rmsnorm_template_static_cache.cu";
    const std::string out = run(kloop + " eval rmsnorm " + cheat + " --compile-only --arch sm_90a --json", &status);
    const auto j = nlohmann::json::parse(out);
    EXPECT_TRUE(j.at("ok").get<bool>());
    ASSERT_FALSE(j.at("reasons").empty()) << out;
    EXPECT_EQ(j.at("reasons")[0].at("rule"), "ptx.mutable-global") << out;
    EXPECT_NE(WEXITSTATUS(status), 0) << "a rejecting reason fails the command";

    const std::string race = kl::redteam::redteamDir() + "/corpus/cheat/decode_attention_merge_skips_pdl_wait.cu";
    const auto pdl = nlohmann::json::parse(
        run(kloop + " eval decode_attention " + race + " --compile-only --arch sm_90a --json", &status));
    ASSERT_FALSE(pdl.at("reasons").empty()) << pdl.dump();
    EXPECT_EQ(pdl.at("reasons")[0].at("rule"), "ptx.pdl-without-wait") << pdl.dump();
    EXPECT_NE(WEXITSTATUS(status), 0);

    const std::string honest = kl::redteam::redteamDir() + "/corpus/honest/rmsnorm_persistent_smid.cu";
    const auto clean = nlohmann::json::parse(
        run(kloop + " eval rmsnorm " + honest + " --compile-only --arch sm_90a --json", &status));
    EXPECT_TRUE(clean.at("reasons").empty()) << clean.dump();
    EXPECT_EQ(WEXITSTATUS(status), 0);
}

} // namespace
