// The engine in process, for the pipeline GPU tests (test_pipeline_gpu.cpp): the two-stage pipeline rmsnorm ->
// silu_and_mul with one stage's plan wrapped to do what no statically clean candidate can. Prints the pipeline result
// JSON on stdout. Modes (argv[1]):
//   capture       act synchronizes its stream after its launches: fine eager, fatal to stream capture;
//   skip-timed    act runs honestly in verification (its first two eager runs), then skips its launches: a stale
//                 output, the buffer holding whatever was there;
//   canary-timed  act, after verification, also writes the word after its output buffer;
//   input-timed   norm, after verification, also writes its input x.
// Graph captures always run the wrapped plan honestly, so the pipeline's graph is right.
#include "core/catalogue.h"
#include "core/session_store.h"
#include "kernels/worker/cuda_check.h"
#include "kernels/worker/engine.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <string>

namespace {

enum class Mode { Capture, SkipTimed, CanaryTimed, InputTimed };

class WrappedPlan final : public kl::worker::Plan {
public:
    WrappedPlan(std::shared_ptr<kl::worker::Plan> inner, Mode mode)
        : m_inner(std::move(inner))
        , m_mode(mode)
    {
    }
    std::string label() const override
    {
        static const char* names[] = { "synchronizing", "timed-skipping", "timed-overflowing", "timed-input-writing" };
        return std::string(names[static_cast<int>(m_mode)]) + " " + m_inner->label();
    }
    std::unique_ptr<kl::worker::BoundPlan> bind(const kl::Problem& p, const kl::Shape& s) const override
    {
        const kl::Bindings b = s.bindings();
        const kl::TensorSpec* y = p.tensor("y");
        std::uint64_t bytes = kl::dtypeBytes(y->dtype);
        for (const auto& e : y->shape)
            bytes *= static_cast<std::uint64_t>(e.evaluateInt(b));
        return std::make_unique<Bound>(m_inner->bind(p, s), m_mode, bytes);
    }

private:
    class Bound final : public kl::worker::BoundPlan {
    public:
        Bound(std::unique_ptr<kl::worker::BoundPlan> inner, Mode mode, std::uint64_t outputBytes)
            : m_inner(std::move(inner))
            , m_mode(mode)
            , m_outputBytes(outputBytes)
        {
        }
        void run(CUstream s, const kl::worker::BufferMap& b) const override
        {
            if (m_mode == Mode::Capture) {
                m_inner->run(s, b);
                KL_CU(cuStreamSynchronize(s));
                return;
            }
            CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
            KL_CU(cuStreamIsCapturing(s, &capturing));
            const bool timed = capturing == CU_STREAM_CAPTURE_STATUS_NONE && ++m_eagerRuns > 2;
            if (!timed || m_mode != Mode::SkipTimed)
                m_inner->run(s, b);
            if (timed && m_mode == Mode::CanaryTimed)
                KL_CU(cuMemsetD32Async(b.at("y") + (m_outputBytes + 3) / 4 * 4, 0, 1, s));
            if (timed && m_mode == Mode::InputTimed)
                KL_CU(cuMemsetD32Async(b.at("x"), 0, 4, s));
        }
        const std::vector<kl::worker::WorkspaceNeed>& workspaces() const override { return m_inner->workspaces(); }
        std::vector<std::string> symbols() const override { return m_inner->symbols(); }

    private:
        std::unique_ptr<kl::worker::BoundPlan> m_inner;
        Mode m_mode;
        std::uint64_t m_outputBytes;
        mutable int m_eagerRuns = 0; // verification runs the stage eager twice: end to end and alone
    };
    std::shared_ptr<kl::worker::Plan> m_inner;
    Mode m_mode;
};

} // namespace

int main(int argc, char** argv)
{
    const std::map<std::string, Mode> modes = { { "capture", Mode::Capture }, { "skip-timed", Mode::SkipTimed },
        { "canary-timed", Mode::CanaryTimed }, { "input-timed", Mode::InputTimed } };
    const auto mode = modes.find(argc > 1 ? argv[1] : "capture");
    if (mode == modes.end()) {
        std::cerr << "pipeline probe: unknown mode " << argv[1] << "\n";
        return 2;
    }
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
        const std::size_t wrapped = mode->second == Mode::InputTimed ? 0 : 1;
        auto plan = std::make_shared<WrappedPlan>(runs[wrapped].problem->baseline, mode->second);
        runs[wrapped].implLabel = plan->label().substr(0, plan->label().find(' ')) + " baseline";
        runs[wrapped].impl = std::move(plan);
        runs[wrapped].differsFromBaseline = true;
        kl::worker::PipelineOptions o;
        o.shapes = { p.space.tuningShapes.front() };
        o.maxSecondsPerShape = 0.5;
        std::cout << kl::toJson(engine.runPipeline(p, runs, o)).dump() << "\n";
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "pipeline probe: " << e.what() << "\n";
        return 1;
    }
}
