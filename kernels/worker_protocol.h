#pragma once
// The kloop-worker protocol: one JSON object per line over a byte stream (stdin/stdout of a child process
// today, ssh later). Every request carries an integer "id" and an "op"; every response echoes the id with
// "ok" and either the result fields or "error". A response with "fatal": true means the worker's CUDA
// context is gone (sticky fault) and the worker exits right after sending it.
//
// ops: hello, load_problem, compile, verify, time, trace, profile, shutdown (see kernels/HARNESS.md for fields).
//
// The wire forms below live in kl::wire so they never clash with the session-store forms in core/json_io.
#include "core/device.h"
#include "core/evaluation.h"
#include "core/kernel_spec.h"
#include "kernels/plan_profile.h"

#include <nlohmann/json.hpp>
#include <string>

namespace kl::wire {

using Json = nlohmann::json;

constexpr int kProtocolVersion = 1;

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

} // namespace kl::wire
