// The research loop and the tuner on real kernels (GPU suite): tune rmsnorm for a few evaluations, and resume a
// session copied mid-run (kill -9) without measuring anything twice.
#include "agent/tuner/tuner_agent.h"
#include "core/json_io.h"
#include "core/research_loop.h"
#include "kernels/gpu_evaluator.h"
#include "tests/core/loop_test_support.h"

#include <gtest/gtest.h>
#include <set>

using namespace kl;

namespace {

// Delegates to the GPU evaluator; copies the session directory at the n-th evaluation (a kill -9 snapshot).
class SnapshottingEvaluator final : public Evaluator {
public:
    SnapshottingEvaluator(Evaluator& inner, std::filesystem::path from, std::filesystem::path to, int at)
        : m_inner(inner)
        , m_from(std::move(from))
        , m_to(std::move(to))
        , m_at(at)
    {
    }
    const DeviceInfo& device() const override { return m_inner.device(); }
    const Problem& problem() const override { return m_inner.problem(); }
    CompileReport compile(const Candidate& c) override { return m_inner.compile(c); }
    Evaluation evaluate(const Candidate& c, const EvaluateOptions& o, const CancelToken& t) override
    {
        if (++m_calls == m_at)
            std::filesystem::copy(m_from, m_to, std::filesystem::copy_options::recursive);
        std::lock_guard lock(m_mutex);
        params.push_back(c.params);
        return m_inner.evaluate(c, o, t);
    }
    std::vector<ParamValues> params;

private:
    Evaluator& m_inner;
    std::filesystem::path m_from, m_to;
    int m_at;
    std::atomic<int> m_calls { 0 };
    std::mutex m_mutex;
};

std::unique_ptr<SessionStore> seededSession(
    const std::filesystem::path& dir, const Problem& p, const DeviceInfo& d, int budget)
{
    Session h;
    h.id = "gpu-loop";
    h.problemName = p.name;
    h.problemFolder = p.folder;
    h.device = d;
    h.settings.agent = "tuner:random";
    h.settings.budget.maxEvaluations = budget;
    auto store = SessionStore::create(dir, h);
    CandidateId parent;
    for (const std::string& file : { p.baselineFile, p.templateFile }) {
        Candidate c;
        c.source = readFile(std::filesystem::path(p.folder) / file);
        c.params = parseKernelSpec(c.source).defaults();
        c.parentId = parent;
        parent = store->proposeCandidate(c).candidateId;
    }
    store->moveHead(parent, "template");
    return store;
}

} // namespace

TEST(GpuLoop, TunesRmsnormAndResumesAfterAKill)
{
    Problem problem = loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/rmsnorm");
    Shape s;
    s.dims = { { "T", 4096 }, { "H", 8192 } };
    problem.tuningShapes = { s };
    GpuEvaluator gpu(problem);
    DeviceInfo device;
    try {
        device = gpu.device();
    } catch (const std::exception& e) {
        GTEST_SKIP() << "no CUDA device: " << e.what();
    }
    const auto dir = testonly::freshDir("gpu-loop");
    const auto snapshot = testonly::freshDir("gpu-loop-snapshot");
    SnapshottingEvaluator first(gpu, dir, snapshot, 5);
    {
        auto store = seededSession(dir, problem, device, 10);
        auto agent = makeTunerAgent("random");
        ResearchLoop loop(*store, first, *agent);
        const LoopResult r = loop.run();
        EXPECT_EQ(r.reason, "budget: 10 evaluations");
        ASSERT_TRUE(r.best) << "no configuration of the template beat the naive baseline";
        EXPECT_GT(r.bestObjective, 1.0);
        const Evaluation& best = store->session().evaluations.at(*r.best);
        EXPECT_TRUE(best.correctEverywhere());
    }
    auto reopened = SessionStore::open(snapshot);
    std::set<ParamValues> recorded;
    for (const auto& id : reopened->session().tree.order())
        if (reopened->session().evaluations.count(id) && isTerminal(reopened->session().tree.at(id).status))
            recorded.insert(reopened->session().tree.at(id).params);
    SnapshottingEvaluator second(gpu, dir, snapshot / "unused", -1);
    auto agent = makeTunerAgent("random");
    ResearchLoop loop(*reopened, second, *agent);
    const LoopResult r = loop.run();
    EXPECT_EQ(r.reason, "budget: 10 evaluations");
    for (const ParamValues& p : second.params)
        EXPECT_FALSE(recorded.count(p)) << "re-measured a recorded configuration";
    std::filesystem::remove_all(dir);
    std::filesystem::remove_all(snapshot);
}
