#pragma once
// The kloop-worker protocol: one JSON object per line over a byte stream (stdin/stdout of a child process
// today, ssh later). Every request carries an integer "id" and an "op"; every response echoes the id with
// "ok" and either the result fields or "error". A response with "fatal": true means the worker's CUDA
// context is gone (sticky fault) and the worker exits right after sending it.
//
// ops: hello, ping, sample, load_problem, compile, verify, time, trace, profile, pipeline, shutdown (see
// kernels/HARNESS.md for fields). Each op has one request and one reply struct below, serialised here and nowhere else:
// the client (kernels/worker_client), the worker (kernels/worker/worker_main) and the worker test double all use them.
// A ping is answered at once even while another request runs, so a client tells a busy worker from a lost one.
//
// The wire forms below live in kl::wire so they never clash with the session-store forms in core/json_io.
#include "core/device.h"
#include "core/evaluation.h"
#include "core/kernel_spec.h"
#include "core/pipeline_result.h"
#include "core/problem.h"
#include "kernels/plan_profile.h"

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kl::wire {

using Json = nlohmann::json;

constexpr int kProtocolVersion = 2; // 2: typed ops, ping heartbeats, the hello's worker_version
std::string softwareVersion(); // KernelLoop's version, which the client and the worker both report

std::string base64Encode(const std::string& bytes);
std::string base64Decode(const std::string& text); // throws std::invalid_argument on bad input

Json toJson(const DeviceInfo& d);
DeviceInfo deviceInfo(const Json& j);
Json toJson(const DeviceSample& d);
DeviceSample deviceSample(const Json& j);
Json toJson(const TimingStats& t);
TimingStats timingStats(const Json& j);
Json toJson(const CorrectnessStats& c);
CorrectnessStats correctnessStats(const Json& j);
Json toJson(const VerdictReason& r);
VerdictReason verdictReason(const Json& j);
Json toJson(const ShapeResult& s);
ShapeResult shapeResult(const Json& j);
Json toJson(const CompileReport& c);
CompileReport compileReport(const Json& j);
Json toJson(const Shape& s);
Shape shape(const Json& j);
Json toJson(const ParamValues& p);
ParamValues paramValues(const Json& j);
// A candidate's per-kernel launch ABI (Triton): {"kernel": {"shared": N, "null_pointers": N}}.
Json toJson(const std::map<std::string, KernelAbi>& abi);
std::map<std::string, KernelAbi> kernelAbi(const Json& j); // throws InputError on a bad entry

// load_problem's "tolerances" entries: one output's tolerance as the worker judges it, and what it came from.
struct OutputToleranceWire {
    std::string output;
    std::string dtype;
    Tolerance stated;
    double measuredRelL2 = 0; // the reference's fp32 build against its fp64 build
    double measuredMaxAbs = 0;
    Tolerance tolerance;
};
Json toJson(const OutputToleranceWire& t);
OutputToleranceWire outputTolerance(const Json& j, const std::string& where); // InputError naming the field

// The profile op's forms. Parsing is strict (InputError naming the field) because the GUI and the CLI read them.
Json toJson(const KernelRecord& k); // also the trace op's "records" entries
KernelRecord kernelRecord(const Json& j, const std::string& where);
Json toJson(const SolCounters& k);
SolCounters solCounters(const Json& j, const std::string& where);
Json toJson(const PlanProfile& p);
PlanProfile planProfile(const Json& j, const std::string& where);
Json toJson(const ProfileReport& r); // the profile op's response fields
ProfileReport profileReport(const Json& j, const std::string& where);

// The candidate as every op that runs it carries it: the client's CUBIN (or the source to compile there).
struct CandidateWire {
    std::string key;
    std::string source;
    ParamValues params;
    std::optional<std::string> cubin; // raw bytes; base64 on the wire
    std::map<std::string, std::string> lowered; // planned kernel name -> CUBIN symbol
    std::map<std::string, KernelAbi> abi; // what Triton's compiler adds to a kernel's launch (empty for CUDA)
};

struct HelloReply;
struct HelloRequest {
    static constexpr const char* kOp = "hello";
    using Reply = HelloReply;
    int protocol = kProtocolVersion;
    std::string clientVersion = softwareVersion();
};
struct HelloReply {
    int protocol = 0; // 0: a worker older than protocol 2, which did not say
    std::string workerVersion;
    DeviceInfo device;
    long pid = 0; // on the worker's host
    std::string host;
    bool cupti = false;
    DeviceSample sample;
    bool testDouble = false;
};

struct PingReply;
struct PingRequest {
    static constexpr const char* kOp = "ping";
    using Reply = PingReply;
};
struct PingReply {
    std::string busyOp; // the op being served, "" when idle
    double busySeconds = 0;
};

struct SampleReply;
struct SampleRequest {
    static constexpr const char* kOp = "sample";
    using Reply = SampleReply;
};
struct SampleReply {
    DeviceSample sample;
};

struct LoadProblemReply;
struct LoadProblemRequest {
    static constexpr const char* kOp = "load_problem";
    using Reply = LoadProblemReply;
    Problem problem;
    std::string referenceSource;
    std::string baselineSource;
};
struct LoadProblemReply {
    std::string problem;
    std::string baselineKind;
    CompileReport referenceCompile;
    CompileReport baselineCompile;
    std::vector<OutputToleranceWire> tolerances;
};

struct CompileReply;
struct CompileRequest {
    static constexpr const char* kOp = "compile";
    using Reply = CompileReply;
    CandidateWire candidate;
};
struct CompileReply {
    CompileReport report;
    std::string key; // later requests may send {key, source, params} without the CUBIN
};

struct VerifyReply;
struct VerifyRequest {
    static constexpr const char* kOp = "verify";
    using Reply = VerifyReply;
    std::string problem;
    CandidateWire candidate;
    std::vector<Shape> shapes;
    std::vector<bool> heldOut; // parallel to shapes
    std::uint64_t seed = 1;
    bool cupti = true;
    bool graphCheck = true;
};
// verify, time and trace answer with the worker's compile report; when the module did not load, nothing ran.
struct VerifyReply {
    CompileReport compile;
    bool ran = false;
    std::vector<ShapeResult> shapes;
    std::vector<VerdictReason> reasons;
    std::int64_t kernelRecords = 0;
    bool cuptiChecked = false;
};

// How a time request times each shape: "always" as CUDA graph replays, "never" as back-to-back launches, "auto"
// graphs only for a plan under the worker's threshold (20 us).
bool isGraphMode(const std::string& mode);

struct TimeReply;
struct TimeRequest {
    static constexpr const char* kOp = "time";
    using Reply = TimeReply;
    std::string problem;
    CandidateWire candidate;
    std::vector<Shape> shapes;
    bool baseline = true; // interleave the baseline: candidate and baseline are timed by the same GPU
    double maxSecondsPerShape = 2.0;
    double targetRelCi = 0.01;
    int minSamples = 10;
    int maxSamples = 4000;
    std::string graphMode = "auto";
    bool recheck = true;
    bool graphTiming = true;
    std::uint64_t seed = 1;
    bool returnSamples = false;
};
struct TimedShape {
    ShapeResult result;
    DeviceSample before;
    DeviceSample after;
    bool throttled = false;
    int inputSets = 0;
    int outputSets = 0;
    int checkedBatches = 0;
    std::uint64_t rotationBytes = 0;
    std::vector<double> candidateSamplesUs; // with return_samples
    std::vector<double> baselineSamplesUs;
};
struct TimeReply {
    CompileReport compile;
    bool ran = false;
    std::vector<TimedShape> shapes;
    std::vector<VerdictReason> reasons;
};

struct TraceReply;
struct TraceRequest {
    static constexpr const char* kOp = "trace";
    using Reply = TraceReply;
    std::string problem;
    CandidateWire candidate;
    Shape shape;
    int launches = 50;
};
struct TraceReply {
    CompileReport compile;
    bool ran = false;
    std::vector<KernelRecord> records;
    std::vector<double> eventUs;
    bool cupti = false;
};

struct ProfileOpReply;
struct ProfileOpRequest {
    static constexpr const char* kOp = "profile";
    using Reply = ProfileOpReply;
    std::string problem;
    CandidateWire candidate;
    Shape shape;
    bool sol = true;
    bool trace = true;
    int launches = 5;
};
struct ProfileOpReply {
    CompileReport compile;
    std::optional<ProfileReport> report; // none: the module did not load (compile says why)
};

// The pipeline op: every stage problem loaded with load_problem first; per stage, what runs: "baseline" and
// "library" (the problem's baseline plan, cuBLAS where it names a library), "reference", or "candidate" with its
// module.
struct PipelineStageWire {
    std::string impl = "baseline";
    std::string label; // StageImpl::describe(), for the result
    std::optional<CandidateWire> candidate;
};
struct PipelineReply;
struct PipelineRequest {
    static constexpr const char* kOp = "pipeline";
    using Reply = PipelineReply;
    Json pipeline; // kl::toJson(Pipeline)
    std::vector<PipelineStageWire> stages; // parallel to the pipeline's stages
    std::vector<Shape> shapes;
    std::uint64_t seed = 1;
    double maxSecondsPerShape = 2.0;
    double targetRelCi = 0.01;
    int minSamples = 10;
    int maxSamples = 2000;
    int stageSamples = 24;
};
struct PipelineReply {
    std::vector<CompileReport> compiles; // per candidate stage, in stage order; nothing ran when one failed
    bool ran = false;
    PipelineResult result;
};

struct ShutdownReply { };
struct ShutdownRequest {
    static constexpr const char* kOp = "shutdown";
    using Reply = ShutdownReply;
};

// Requests: the op's fields plus "op" (the client adds "id"). Replies: the fields the worker adds to {id, ok}.
// Parsing is strict: an InputError names the op and the field.
Json toJson(const CandidateWire& c);
CandidateWire candidateWire(const Json& j, const std::string& where);
Json toJson(const HelloRequest& r);
Json toJson(const PingRequest& r);
Json toJson(const SampleRequest& r);
Json toJson(const LoadProblemRequest& r);
Json toJson(const CompileRequest& r);
Json toJson(const VerifyRequest& r);
Json toJson(const TimeRequest& r);
Json toJson(const TraceRequest& r);
Json toJson(const ProfileOpRequest& r);
Json toJson(const PipelineRequest& r);
Json toJson(const ShutdownRequest& r);
Json toJson(const HelloReply& r);
Json toJson(const PingReply& r);
Json toJson(const SampleReply& r);
Json toJson(const LoadProblemReply& r);
Json toJson(const CompileReply& r);
Json toJson(const VerifyReply& r);
Json toJson(const TimeReply& r);
Json toJson(const TraceReply& r);
Json toJson(const ProfileOpReply& r);
Json toJson(const PipelineReply& r);
Json toJson(const ShutdownReply& r);

void fromJson(const Json& j, HelloRequest& out);
void fromJson(const Json& j, PingRequest& out);
void fromJson(const Json& j, SampleRequest& out);
void fromJson(const Json& j, LoadProblemRequest& out);
void fromJson(const Json& j, CompileRequest& out);
void fromJson(const Json& j, VerifyRequest& out);
void fromJson(const Json& j, TimeRequest& out);
void fromJson(const Json& j, TraceRequest& out);
void fromJson(const Json& j, ProfileOpRequest& out);
void fromJson(const Json& j, PipelineRequest& out);
void fromJson(const Json& j, ShutdownRequest& out);
void fromJson(const Json& j, HelloReply& out);
void fromJson(const Json& j, PingReply& out);
void fromJson(const Json& j, SampleReply& out);
void fromJson(const Json& j, LoadProblemReply& out);
void fromJson(const Json& j, CompileReply& out);
void fromJson(const Json& j, VerifyReply& out);
void fromJson(const Json& j, TimeReply& out);
void fromJson(const Json& j, TraceReply& out);
void fromJson(const Json& j, ProfileOpReply& out);
void fromJson(const Json& j, PipelineReply& out);
void fromJson(const Json& j, ShutdownReply& out);

template <class T> T parse(const Json& j)
{
    T out;
    fromJson(j, out);
    return out;
}

// The hello's version check, as the client words it: empty when the worker speaks this protocol.
std::string versionMismatch(const HelloReply& hello, const std::string& workerName, const std::string& installHint);

} // namespace kl::wire
