// The engine in process, for the pipeline GPU test (test_pipeline_gpu.cpp): the two-stage pipeline rmsnorm ->
// silu_and_mul whose second stage synchronizes its stream after its launches, fine eager and fatal to stream capture.
// Prints the pipeline result JSON on stdout.
#include "core/catalogue.h"
#include "core/session_store.h"
#include "kernels/worker/cuda_check.h"
#include "kernels/worker/engine.h"

#include <cstdio>
#include <iostream>

namespace {

// A stage plan that synchronizes the stream after running the plan it wraps: fine eager, fatal to stream capture.
class SynchronizingPlan final : public kl::worker::Plan {
public:
    explicit SynchronizingPlan(std::shared_ptr<kl::worker::Plan> inner)
        : m_inner(std::move(inner))
    {
    }
    std::string label() const override { return "synchronizing " + m_inner->label(); }
    std::unique_ptr<kl::worker::BoundPlan> bind(const kl::Problem& p, const kl::Shape& s) const override
    {
        return std::make_unique<Bound>(m_inner->bind(p, s));
    }

private:
    class Bound final : public kl::worker::BoundPlan {
    public:
        explicit Bound(std::unique_ptr<kl::worker::BoundPlan> inner)
            : m_inner(std::move(inner))
        {
        }
        void run(CUstream s, const kl::worker::BufferMap& b) const override
        {
            m_inner->run(s, b);
            KL_CU(cuStreamSynchronize(s));
        }
        const std::vector<kl::worker::WorkspaceNeed>& workspaces() const override { return m_inner->workspaces(); }
        std::vector<std::string> symbols() const override { return m_inner->symbols(); }

    private:
        std::unique_ptr<kl::worker::BoundPlan> m_inner;
    };
    std::shared_ptr<kl::worker::Plan> m_inner;
};

} // namespace

int main()
{
    try {
        const kl::Pipeline p = kl::loadPipeline(KL_SOURCE_DIR "/tests/kernels/pipelines/norm_act");
        kl::worker::Engine engine;
        for (const auto& st : p.stages) {
            if (engine.problem(st.problemName))
                continue;
            const std::filesystem::path folder = st.problem.folder;
            engine.loadProblem(st.problem, kl::readFile(folder / st.problem.referenceFile),
                kl::readFile(folder / st.problem.baselineFile));
        }
        std::vector<kl::worker::PipelineStageRun> runs(p.stages.size());
        for (std::size_t i = 0; i < runs.size(); ++i)
            runs[i].problem = engine.problem(p.stages[i].problemName);
        runs[1].impl = std::make_shared<SynchronizingPlan>(runs[1].problem->baseline);
        runs[1].implLabel = "synchronizing baseline";
        runs[1].differsFromBaseline = true;
        kl::worker::PipelineOptions o;
        o.shapes = { p.space.tuningShapes.front() };
        o.maxSecondsPerShape = 0.5;
        std::cout << kl::toJson(engine.runPipeline(p, runs, o)).dump() << "\n";
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "pipeline capture probe: " << e.what() << "\n";
        return 1;
    }
}
