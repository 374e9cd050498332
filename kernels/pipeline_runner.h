#pragma once
// Runs a pipeline on a kloop-worker (its pipeline op, kernels/HARNESS.md "Pipelines"): loads every stage problem,
// resolves each stage's implementation (a candidate from its session, which must have accepted it; the baseline,
// the library fallback or the reference), sends the request and returns the judged result.
#include "core/pipeline_result.h"
#include "kernels/worker_client.h"
#include "kernels/worker_protocol.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kl {

struct PipelineRunOptions {
    WorkerOptions worker;
    std::vector<Shape> shapes; // empty: the pipeline's tuning shapes
    std::uint64_t seed = 1;
    double maxSecondsPerShape = 2.0;
    double targetRelCi = 0.01;
    int minSamples = 10;
    double timeoutSeconds = 900;
};

// Each stage's implementation in the pipeline op's form. A candidate comes from stage.impl.session (relative: to the
// pipeline's folder): the candidate must be there, of the stage's problem, and accepted. Throws InputError naming
// the stage.
std::vector<wire::PipelineStageWire> pipelineStageWires(const Pipeline& p);

// The request, without a worker: for `kloop pipeline run --dry-run` and the tests.
wire::PipelineRequest pipelineRequest(const Pipeline& p, const PipelineRunOptions& o);

// Runs it on the worker `client` (started when not running). Throws std::runtime_error when the worker fails or a
// candidate stage does not compile there (its log in the message).
PipelineResult runPipelineOnWorker(const Pipeline& p, const PipelineRunOptions& o, WorkerClient& client);
// The same for a request already made (pipelineRequest), e.g. with a stage's candidate given directly.
PipelineResult runPipelineOnWorker(
    const Pipeline& p, const wire::PipelineRequest& req, double timeoutSeconds, WorkerClient& client);

} // namespace kl
