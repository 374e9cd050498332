#pragma once
// The request loop of a kloop-worker, shared by the real worker (kernels/worker/worker_main.cpp) and the worker
// test double (tests/cli/fake_gpu_worker.cpp): read one JSON request per line, parse it into its typed request,
// hand it to the handler, write the typed reply. A reader thread answers ping at once, also while a long request
// runs, so the client's heartbeat tells a busy worker from a lost one (kernels/HARNESS.md, "Heartbeats").
#include "kernels/worker_protocol.h"

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

namespace kl::wire {

class WorkerHandler {
public:
    virtual ~WorkerHandler() = default;
    virtual HelloReply hello(const HelloRequest& r) = 0;
    virtual SampleReply sample(const SampleRequest& r) = 0;
    virtual LoadProblemReply loadProblem(const LoadProblemRequest& r) = 0;
    virtual CompileReply compile(const CompileRequest& r) = 0;
    virtual VerifyReply verify(const VerifyRequest& r) = 0;
    virtual TimeReply time(const TimeRequest& r) = 0;
    virtual TraceReply trace(const TraceRequest& r) = 0;
    virtual ProfileOpReply profile(const ProfileOpRequest& r) = 0;
    // A worker without a pipeline engine (the CPU test double) refuses the op.
    virtual PipelineReply pipeline(const PipelineRequest& r);
    // Non-empty when this exception left the worker unusable (a sticky CUDA fault): the reply is marked fatal and
    // the worker exits right after it, so the client starts a fresh one.
    virtual std::optional<std::string> fatal(const std::exception&) { return std::nullopt; }
};

// Writes the ready line, serves stdin until shutdown or end of input; returns the process exit code. `protocol`
// is where protocol lines go (the worker keeps its real stdout for stray library output).
int serveWorker(WorkerHandler& handler, std::FILE* protocol);
// The line a worker that cannot start at all sends instead of ready.
void sendStartFailure(std::FILE* protocol, const std::string& why);

} // namespace kl::wire
