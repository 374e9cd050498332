// The red-team corpus through the real harness on a GPU (label gpu; skipped without a device). Dynamic cheats
// run with the source and PTX rules switched off (KL_REDTEAM_STATIC=1 switches them on), so each dynamic
// defence is shown on its own; each must be rejected with one of its expected rules. Honest candidates must be correct
// everywhere with no blocking reason. KL_REDTEAM_OUT=<dir> writes redteam-gpu.json with every verdict; KL_REDTEAM_SEED
// fixes the seed.
#include "core/json_io.h"
#include "kernels/gpu_evaluator.h"
#include "kernels/referee/referee.h"
#include "tests/redteam/corpus.h"
#include "tests/support/gpu_available.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <memory>

namespace {

using kl::redteam::CorpusCase;

bool runsOnGpu(const CorpusCase& c)
{
    return !c.cheat || c.stage == "dynamic";
}

std::vector<CorpusCase> gpuCases()
{
    std::vector<CorpusCase> out;
    for (auto& c : kl::redteam::loadCorpus())
        if (runsOnGpu(c))
            out.push_back(c);
    return out;
}

kl::GpuEvaluator& evaluatorFor(const std::string& problem)
{
    static std::map<std::string, std::unique_ptr<kl::GpuEvaluator>> evaluators;
    auto& e = evaluators[problem];
    if (!e) {
        kl::GpuEvaluatorOptions o;
        o.compileCacheDir = std::filesystem::temp_directory_path() / "kl-redteam-cache";
        // The source and PTX rules are proven in CI; here the GPU defences stand alone. KL_REDTEAM_STATIC=1 runs
        // the whole pipeline instead (what kloop eval does).
        const bool staticOn = std::getenv("KL_REDTEAM_STATIC") && std::string(std::getenv("KL_REDTEAM_STATIC")) == "1";
        o.staticChecks = staticOn;
        o.ptxChecks = staticOn;
        if (const char* w = std::getenv("KL_WORKER"))
            o.worker.command = { w };
        e = std::make_unique<kl::GpuEvaluator>(kl::redteam::corpusProblem(problem), o);
    }
    return *e;
}

struct Outcome {
    std::string file;
    bool cheat = false;
    std::string verdict;
    std::vector<kl::VerdictReason> reasons;
    bool ok = false;
};

std::vector<Outcome>& outcomes()
{
    static std::vector<Outcome> all;
    return all;
}

std::string describe(const kl::Evaluation& e)
{
    std::string s = std::string("verdict ") + kl::verdictName(e.verdict);
    for (const auto& r : e.reasons)
        s += "\n  " + r.rule + (r.blocking ? " [blocking]: " : " [review]: ") + r.message;
    if (!e.compile.ok)
        s += "\n" + e.compile.log;
    return s;
}

class RedteamGpu : public ::testing::TestWithParam<CorpusCase> { };

TEST_P(RedteamGpu, Verdict)
{
    REQUIRE_GPU();
    const CorpusCase& c = GetParam();
    kl::Candidate cand;
    cand.id = c.name();
    cand.source = c.source();
    cand.params = kl::parseKernelSpec(cand.source).defaults();
    kl::EvaluateOptions opt;
    opt.heldOutShapes = true;
    opt.heldOutCount = 4;
    opt.maxSecondsPerShape = 0.3;
    opt.seed = std::getenv("KL_REDTEAM_SEED") ? std::strtoull(std::getenv("KL_REDTEAM_SEED"), nullptr, 10) : 20261130;
    const kl::Evaluation e = evaluatorFor(c.problem).evaluate(cand, opt, kl::CancelToken {});

    Outcome o { c.file, c.cheat, kl::verdictName(e.verdict), e.reasons, false };
    if (c.cheat) {
        const bool named = std::any_of(e.reasons.begin(), e.reasons.end(), [&](const kl::VerdictReason& r) {
            return r.blocking && std::find(c.expect.begin(), c.expect.end(), r.rule) != c.expect.end();
        });
        // A fault is a rejection too: a crashed candidate is never accepted, and its worker was restarted.
        o.ok = named && (e.verdict == kl::Verdict::Rejected || e.verdict == kl::Verdict::Crashed);
        if (!o.ok && !c.neutralizedTwin.empty() && e.verdict != kl::Verdict::Rejected && e.correctEverywhere()) {
            // A defence that removes the cheat's effect (state poisoned before every launch) leaves an honest
            // kernel: it must then gain nothing over its honest twin.
            kl::Candidate twin;
            twin.id = "twin";
            kl::redteam::CorpusCase twinCase;
            twinCase.file = c.neutralizedTwin;
            twin.source = twinCase.source();
            twin.params = kl::parseKernelSpec(twin.source).defaults();
            const kl::Evaluation t = evaluatorFor(c.problem).evaluate(twin, opt, kl::CancelToken {});
            o.ok = t.objective > 0 && e.objective <= t.objective * 1.1;
            o.verdict += " (neutralized: objective " + std::to_string(e.objective) + ", twin "
                + std::to_string(t.objective) + ")";
        }
        EXPECT_TRUE(o.ok) << c.file << " (" << c.note << ") must be rejected with " << c.expect.front()
                          << (c.neutralizedTwin.empty() ? "" : " or gain nothing over " + c.neutralizedTwin) << "; "
                          << describe(e);
    } else {
        EXPECT_TRUE(kl::referee::checkSource(cand.source, evaluatorFor(c.problem).problem()).empty());
        const auto module = evaluatorFor(c.problem).compileModule(cand);
        EXPECT_TRUE(kl::referee::checkPtx(module->ptx, evaluatorFor(c.problem).problem()).empty());
        const bool blocked = kl::referee::hasBlocking(e.reasons);
        o.ok = !blocked && e.correctEverywhere() && e.verdict != kl::Verdict::Rejected;
        EXPECT_TRUE(o.ok) << c.file << " (" << c.note << ") is honest and must pass; " << describe(e);
        // Review flags on an honest kernel can only be physics judging the shape of its win; show them.
        for (const auto& r : e.reasons)
            if (!r.blocking)
                std::cout << "[ note ] " << c.file << ": " << r.rule << ": " << r.message << "\n";
    }
    outcomes().push_back(std::move(o));
}

INSTANTIATE_TEST_SUITE_P(Corpus, RedteamGpu, ::testing::ValuesIn(gpuCases()),
    [](const ::testing::TestParamInfo<CorpusCase>& param) { return param.param.name(); });

class WriteSummary : public ::testing::Environment {
public:
    void TearDown() override
    {
        const char* dir = std::getenv("KL_REDTEAM_OUT");
        if (!dir || outcomes().empty())
            return;
        kl::Json all = kl::Json::array();
        for (const auto& o : outcomes()) {
            kl::Json reasons = kl::Json::array();
            for (const auto& r : o.reasons)
                reasons.push_back(kl::toJson(r));
            all.push_back({ { "file", o.file }, { "kind", o.cheat ? "cheat" : "honest" }, { "verdict", o.verdict },
                { "as_expected", o.ok }, { "reasons", reasons } });
        }
        std::filesystem::create_directories(dir);
        std::ofstream(std::filesystem::path(dir) / "redteam-gpu.json") << all.dump(1) << "\n";
    }
};
const auto* const kSummary = ::testing::AddGlobalTestEnvironment(new WriteSummary);

} // namespace
