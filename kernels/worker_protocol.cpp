#include "kernels/worker_protocol.h"

#include "core/errors.h"
#include "core/json_io.h"
#include "kl_build_features.h"

#include <cmath>
#include <stdexcept>

namespace kl::wire {

bool isGraphMode(const std::string& mode)
{
    return mode == "auto" || mode == "always" || mode == "never";
}

namespace {
    constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64Encode(const std::string& in)
{
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8)
            | static_cast<unsigned char>(in[i + 2]);
        out += kB64[(v >> 18) & 63];
        out += kB64[(v >> 12) & 63];
        out += kB64[(v >> 6) & 63];
        out += kB64[v & 63];
    }
    if (i < in.size()) {
        unsigned v = static_cast<unsigned char>(in[i]) << 16;
        if (i + 1 < in.size())
            v |= static_cast<unsigned char>(in[i + 1]) << 8;
        out += kB64[(v >> 18) & 63];
        out += kB64[(v >> 12) & 63];
        out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

std::string base64Decode(const std::string& in)
{
    auto val = [](char c) -> int {
        if (c >= 'A' && c <= 'Z')
            return c - 'A';
        if (c >= 'a' && c <= 'z')
            return c - 'a' + 26;
        if (c >= '0' && c <= '9')
            return c - '0' + 52;
        if (c == '+')
            return 62;
        if (c == '/')
            return 63;
        return -1;
    };
    if (in.size() % 4 != 0)
        throw std::invalid_argument("base64 length is not a multiple of 4");
    std::string out;
    out.reserve(in.size() / 4 * 3);
    for (std::size_t i = 0; i < in.size(); i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; ++k) {
            if (in[i + k] == '=' && i + 4 == in.size() && k >= 2) {
                v[k] = 0;
                ++pad;
            } else {
                v[k] = val(in[i + k]);
                if (v[k] < 0 || pad)
                    throw std::invalid_argument("bad base64 character");
            }
        }
        const unsigned w = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
        out += static_cast<char>((w >> 16) & 255);
        if (pad < 2)
            out += static_cast<char>((w >> 8) & 255);
        if (pad < 1)
            out += static_cast<char>(w & 255);
    }
    return out;
}

// The wire carries the same JSON forms as the session store (core/json_io), so nothing is lost between the
// worker and the session.
Json toJson(const DeviceInfo& d)
{
    return kl::toJson(d);
}
DeviceInfo deviceInfo(const Json& j)
{
    return kl::deviceFromJson(j, "device");
}
Json toJson(const DeviceSample& d)
{
    return kl::toJson(d);
}
DeviceSample deviceSample(const Json& j)
{
    return kl::deviceSampleFromJson(j, "sample");
}
Json toJson(const TimingStats& t)
{
    return kl::toJson(t);
}
TimingStats timingStats(const Json& j)
{
    return kl::timingFromJson(j, "timing");
}
Json toJson(const CorrectnessStats& c)
{
    return kl::toJson(c);
}
CorrectnessStats correctnessStats(const Json& j)
{
    return kl::correctnessFromJson(j, "check");
}
Json toJson(const VerdictReason& r)
{
    return kl::toJson(r);
}
VerdictReason verdictReason(const Json& j)
{
    return kl::reasonFromJson(j, "reason");
}
Json toJson(const Shape& s)
{
    return kl::toJson(s);
}
Shape shape(const Json& j)
{
    return kl::shapeFromJson(j, "shape");
}
Json toJson(const ShapeResult& s)
{
    return kl::toJson(s);
}
ShapeResult shapeResult(const Json& j)
{
    return kl::shapeResultFromJson(j, "shape_result");
}
Json toJson(const CompileReport& c)
{
    return kl::toJson(c);
}
CompileReport compileReport(const Json& j)
{
    return kl::compileReportFromJson(j, "compile");
}

Json toJson(const ParamValues& p)
{
    Json j = Json::object();
    for (const auto& [k, v] : p)
        j[k] = v;
    return j;
}

ParamValues paramValues(const Json& j)
{
    ParamValues p;
    for (auto it = j.begin(); it != j.end(); ++it)
        p[it.key()] = it.value().get<std::int64_t>();
    return p;
}

Json toJson(const std::map<std::string, KernelAbi>& abi)
{
    Json j = Json::object();
    for (const auto& [k, a] : abi)
        j[k] = { { "shared", a.dynamicSharedBytes }, { "null_pointers", a.trailingNullPointers } };
    return j;
}

std::map<std::string, KernelAbi> kernelAbi(const Json& j)
{
    std::map<std::string, KernelAbi> out;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const int shared = it.value().at("shared").get<int>();
        const int nulls = it.value().at("null_pointers").get<int>();
        if (shared < 0 || nulls < 0 || nulls > 8)
            throw InputError("candidate.abi." + it.key() + ": shared " + std::to_string(shared) + ", null_pointers "
                + std::to_string(nulls) + " (each at least 0, at most 8 pointers)");
        out[it.key()] = { shared, nulls };
    }
    return out;
}

namespace {

    Json triple(const int v[3])
    {
        return Json::array({ v[0], v[1], v[2] });
    }

    void readTriple(const Json& j, const char* key, const std::string& where, int out[3])
    {
        const Json& a = jsonfield::require(j, key, where);
        if (!a.is_array() || a.size() != 3)
            throw InputError(where + "." + key + ": expected an array of 3 integers");
        for (int i = 0; i < 3; ++i) {
            if (!a[i].is_number_integer() || a[i].get<std::int64_t>() < 0 || a[i].get<std::int64_t>() > INT32_MAX)
                throw InputError(where + "." + key + "[" + std::to_string(i) + "]: expected a non-negative integer");
            out[i] = a[i].get<int>();
        }
    }

    const Json& arrayField(const Json& j, const char* key, const std::string& where)
    {
        const Json& a = jsonfield::require(j, key, where);
        if (!a.is_array())
            throw InputError(where + "." + key + ": expected an array");
        return a;
    }

} // namespace

Json toJson(const KernelRecord& k)
{
    return { { "name", k.name }, { "start_ns", k.startNs }, { "end_ns", k.endNs }, { "grid", triple(k.grid) },
        { "block", triple(k.block) }, { "registers", k.registers }, { "static_shared", k.staticShared },
        { "dynamic_shared", k.dynamicShared }, { "stream", k.stream }, { "correlation", k.correlation },
        { "device_launched", k.deviceLaunched } };
}

KernelRecord kernelRecord(const Json& j, const std::string& where)
{
    if (!j.is_object())
        throw InputError(where + ": expected an object");
    KernelRecord k;
    k.name = jsonfield::string(j, "name", where);
    k.startNs = static_cast<std::uint64_t>(jsonfield::integer(j, "start_ns", where, 0));
    k.endNs = static_cast<std::uint64_t>(jsonfield::integer(j, "end_ns", where, 0));
    if (k.endNs < k.startNs)
        throw InputError(where + ".end_ns: before start_ns");
    readTriple(j, "grid", where, k.grid);
    readTriple(j, "block", where, k.block);
    k.registers = static_cast<int>(jsonfield::integerOr(j, "registers", 0, where, 0, INT32_MAX));
    k.staticShared = static_cast<int>(jsonfield::integerOr(j, "static_shared", 0, where, 0, INT32_MAX));
    k.dynamicShared = static_cast<int>(jsonfield::integerOr(j, "dynamic_shared", 0, where, 0, INT32_MAX));
    k.stream = static_cast<std::uint32_t>(jsonfield::integerOr(j, "stream", 0, where, 0, UINT32_MAX));
    k.correlation = static_cast<std::uint32_t>(jsonfield::integerOr(j, "correlation", 0, where, 0, UINT32_MAX));
    k.deviceLaunched = jsonfield::booleanOr(j, "device_launched", false, where);
    return k;
}

Json toJson(const SolCounters& k)
{
    return { { "name", k.name }, { "duration_ns", k.durationNs }, { "dram_throughput_pct", k.dramThroughputPct },
        { "sm_throughput_pct", k.smThroughputPct }, { "achieved_occupancy_pct", k.achievedOccupancyPct },
        { "dram_bytes", k.dramBytes } };
}

SolCounters solCounters(const Json& j, const std::string& where)
{
    if (!j.is_object())
        throw InputError(where + ": expected an object");
    SolCounters k;
    k.name = jsonfield::stringOr(j, "name", "", where);
    k.durationNs = jsonfield::numberOr(j, "duration_ns", -1, where);
    k.dramThroughputPct = jsonfield::numberOr(j, "dram_throughput_pct", -1, where);
    k.smThroughputPct = jsonfield::numberOr(j, "sm_throughput_pct", -1, where);
    k.achievedOccupancyPct = jsonfield::numberOr(j, "achieved_occupancy_pct", -1, where);
    k.dramBytes = jsonfield::numberOr(j, "dram_bytes", -1, where);
    return k;
}

Json toJson(const PlanProfile& p)
{
    Json records = Json::array();
    for (const auto& r : p.records)
        records.push_back(toJson(r));
    Json sol = Json::array();
    for (const auto& k : p.sol)
        sol.push_back(toJson(k));
    return {
        { "role", p.role }, { "label", p.label }, { "launches", p.launches }, { "kernels_per_run", p.kernelsPerRun },
        { "records", records }, { "event_us", p.eventUs },
        { "sol",
            { { "available", p.solAvailable }, { "note", p.solNote }, { "passes", p.solPasses }, { "kernels", sol } } }
    };
}

PlanProfile planProfile(const Json& j, const std::string& where)
{
    if (!j.is_object())
        throw InputError(where + ": expected an object");
    PlanProfile p;
    p.role = jsonfield::string(j, "role", where);
    if (p.role != "baseline" && p.role != "candidate")
        throw InputError(where + ".role: '" + p.role + "' is neither baseline nor candidate");
    p.label = jsonfield::stringOr(j, "label", "", where);
    p.launches = static_cast<int>(jsonfield::integerOr(j, "launches", 0, where, 0, 1 << 20));
    p.kernelsPerRun = static_cast<int>(jsonfield::integerOr(j, "kernels_per_run", 0, where, 0, 1 << 20));
    const Json& records = arrayField(j, "records", where);
    for (std::size_t i = 0; i < records.size(); ++i)
        p.records.push_back(kernelRecord(records[i], where + ".records[" + std::to_string(i) + "]"));
    if (!p.records.empty() && static_cast<std::size_t>(p.kernelsPerRun) > p.records.size())
        throw InputError(where + ".kernels_per_run: " + std::to_string(p.kernelsPerRun) + " kernels per run but only "
            + std::to_string(p.records.size()) + " records");
    const Json& ev = arrayField(j, "event_us", where);
    for (std::size_t i = 0; i < ev.size(); ++i) {
        if (!ev[i].is_number())
            throw InputError(where + ".event_us[" + std::to_string(i) + "]: expected a number");
        p.eventUs.push_back(ev[i].get<double>());
    }
    const Json& sol = jsonfield::require(j, "sol", where);
    const std::string sw = where + ".sol";
    if (!sol.is_object())
        throw InputError(sw + ": expected an object");
    p.solAvailable = jsonfield::booleanOr(sol, "available", false, sw);
    p.solNote = jsonfield::stringOr(sol, "note", "", sw);
    p.solPasses = static_cast<int>(jsonfield::integerOr(sol, "passes", 0, sw, 0, 1 << 20));
    const Json& kernels = arrayField(sol, "kernels", sw);
    for (std::size_t i = 0; i < kernels.size(); ++i)
        p.sol.push_back(solCounters(kernels[i], sw + ".kernels[" + std::to_string(i) + "]"));
    if (!p.solAvailable && p.solNote.empty())
        throw InputError(sw + ": no counters and no note saying why");
    return p;
}

Json toJson(const ProfileReport& r)
{
    Json plans = Json::array();
    for (const auto& p : r.plans)
        plans.push_back(toJson(p));
    return { { "shape", kl::toJson(r.shape) }, { "compile", kl::toJson(r.compile) },
        { "trace_available", r.traceAvailable }, { "trace_note", r.traceNote }, { "plans", plans } };
}

ProfileReport profileReport(const Json& j, const std::string& where)
{
    if (!j.is_object())
        throw InputError(where + ": expected an object");
    ProfileReport r;
    r.shape = kl::shapeFromJson(jsonfield::require(j, "shape", where), where + ".shape");
    r.compile = kl::compileReportFromJson(jsonfield::require(j, "compile", where), where + ".compile");
    r.traceAvailable = jsonfield::booleanOr(j, "trace_available", false, where);
    r.traceNote = jsonfield::stringOr(j, "trace_note", "", where);
    const Json& plans = arrayField(j, "plans", where);
    for (std::size_t i = 0; i < plans.size(); ++i) {
        PlanProfile p = planProfile(plans[i], where + ".plans[" + std::to_string(i) + "]");
        if (r.plan(p.role))
            throw InputError(where + ".plans[" + std::to_string(i) + "]: a second " + p.role + " plan");
        r.plans.push_back(std::move(p));
    }
    return r;
}

namespace {
    double finiteOr(double v)
    {
        return std::isfinite(v) ? v : -1.0; // -1: the fp32 build gave NaN/Inf or unwritten elements
    }
} // namespace

Json toJson(const OutputToleranceWire& t)
{
    return { { "output", t.output }, { "dtype", t.dtype },
        { "stated", { { "rel_l2", t.stated.relL2 }, { "max_abs", t.stated.maxAbs } } },
        { "measured_fp32_vs_fp64",
            { { "rel_l2", finiteOr(t.measuredRelL2) }, { "max_abs", finiteOr(t.measuredMaxAbs) } } },
        { "tolerance", { { "rel_l2", t.tolerance.relL2 }, { "max_abs", t.tolerance.maxAbs } } } };
}

OutputToleranceWire outputTolerance(const Json& j, const std::string& where)
{
    if (!j.is_object())
        throw InputError(where + ": expected an object");
    auto pair = [&](const char* key, double* relL2, double* maxAbs) {
        const Json& o = jsonfield::require(j, key, where);
        if (!o.is_object())
            throw InputError(where + "." + key + ": expected an object");
        *relL2 = jsonfield::number(o, "rel_l2", where + "." + key);
        *maxAbs = jsonfield::number(o, "max_abs", where + "." + key);
    };
    OutputToleranceWire t;
    t.output = jsonfield::string(j, "output", where);
    t.dtype = jsonfield::string(j, "dtype", where);
    pair("stated", &t.stated.relL2, &t.stated.maxAbs);
    pair("measured_fp32_vs_fp64", &t.measuredRelL2, &t.measuredMaxAbs);
    pair("tolerance", &t.tolerance.relL2, &t.tolerance.maxAbs);
    return t;
}

} // namespace kl::wire

// ---- Typed ops --------------------------------------------------------------------------------------------------

namespace kl::wire {

std::string softwareVersion()
{
    return KL_VERSION;
}

namespace {

    Json op(const char* name)
    {
        return { { "op", name } };
    }

    template <class T> Json array(const std::vector<T>& items)
    {
        Json a = Json::array();
        for (const auto& i : items)
            a.push_back(wire::toJson(i));
        return a;
    }

    std::vector<double> numbers(const Json& j, const char* key, const std::string& where)
    {
        std::vector<double> out;
        if (!j.contains(key))
            return out;
        const Json& a = arrayField(j, key, where);
        for (std::size_t i = 0; i < a.size(); ++i) {
            if (!a[i].is_number())
                throw InputError(where + "." + key + "[" + std::to_string(i) + "]: expected a number");
            out.push_back(a[i].get<double>());
        }
        return out;
    }

    std::string at(const std::string& where, const char* key, std::size_t i)
    {
        return where + "." + key + "[" + std::to_string(i) + "]";
    }

    std::vector<VerdictReason> reasons(const Json& j, const std::string& where)
    {
        std::vector<VerdictReason> out;
        if (!j.contains("reasons"))
            return out;
        const Json& a = arrayField(j, "reasons", where);
        for (std::size_t i = 0; i < a.size(); ++i)
            out.push_back(kl::reasonFromJson(a[i], at(where, "reasons", i)));
        return out;
    }

    // verify/time/trace/profile replies: the worker's compile report; shapes (or plans) only when it ran.
    CompileReport replyCompile(const Json& j, const std::string& where)
    {
        return kl::compileReportFromJson(jsonfield::require(j, "compile", where), where + ".compile");
    }

    std::uint64_t seedOf(const Json& j, const std::string& where)
    {
        if (!j.contains("seed"))
            return 1;
        if (!j.at("seed").is_number_unsigned()
            && !(j.at("seed").is_number_integer() && j.at("seed").get<std::int64_t>() >= 0))
            throw InputError(where + ".seed: expected a non-negative integer");
        return j.at("seed").get<std::uint64_t>();
    }

    int intOr(const Json& j, const char* key, int fallback, const std::string& where, int min = 0, int max = INT32_MAX)
    {
        return static_cast<int>(jsonfield::integerOr(j, key, fallback, where, min, max));
    }

    std::string problemName(const Json& j, const std::string& where)
    {
        return jsonfield::string(j, "problem", where);
    }

    CandidateWire candidateOf(const Json& j, const std::string& where)
    {
        return candidateWire(jsonfield::require(j, "candidate", where), where + ".candidate");
    }

    Json runOp(const char* name, const std::string& problem, const CandidateWire& c)
    {
        Json j = op(name);
        j["problem"] = problem;
        j["candidate"] = wire::toJson(c);
        return j;
    }

} // namespace

Json toJson(const CandidateWire& c)
{
    Json j
        = { { "key", c.key }, { "source", c.source }, { "params", wire::toJson(c.params) }, { "lowered", c.lowered } };
    if (c.cubin)
        j["cubin_b64"] = base64Encode(*c.cubin);
    if (!c.abi.empty())
        j["abi"] = toJson(c.abi);
    return j;
}

CandidateWire candidateWire(const Json& j, const std::string& where)
{
    if (!j.is_object())
        throw InputError(where + ": expected an object");
    CandidateWire c;
    c.key = jsonfield::stringOr(j, "key", "", where);
    c.source = jsonfield::string(j, "source", where);
    if (j.contains("params")) {
        const Json& p = j.at("params");
        if (!p.is_object())
            throw InputError(where + ".params: expected an object of integers");
        for (auto it = p.begin(); it != p.end(); ++it) {
            if (!it.value().is_number_integer())
                throw InputError(where + ".params." + it.key() + ": expected an integer");
            c.params[it.key()] = it.value().get<std::int64_t>();
        }
    }
    if (j.contains("cubin_b64")) {
        try {
            c.cubin = base64Decode(jsonfield::string(j, "cubin_b64", where));
        } catch (const std::invalid_argument& e) {
            throw InputError(where + ".cubin_b64: " + e.what());
        }
    }
    if (j.contains("lowered")) {
        const Json& l = j.at("lowered");
        if (!l.is_object())
            throw InputError(where + ".lowered: expected an object of strings");
        for (auto it = l.begin(); it != l.end(); ++it) {
            if (!it.value().is_string())
                throw InputError(where + ".lowered." + it.key() + ": expected a string");
            c.lowered[it.key()] = it.value().get<std::string>();
        }
    }
    if (j.contains("abi"))
        c.abi = kernelAbi(j.at("abi"));
    return c;
}

Json toJson(const HelloRequest& r)
{
    Json j = op(HelloRequest::kOp);
    j["protocol"] = r.protocol;
    j["client_version"] = r.clientVersion;
    return j;
}
void fromJson(const Json& j, HelloRequest& out)
{
    out.protocol = intOr(j, "protocol", 0, "hello");
    out.clientVersion = jsonfield::stringOr(j, "client_version", "", "hello");
}
Json toJson(const HelloReply& r)
{
    return { { "protocol", r.protocol }, { "worker_version", r.workerVersion }, { "device", wire::toJson(r.device) },
        { "pid", r.pid }, { "host", r.host }, { "cupti", r.cupti }, { "sample", wire::toJson(r.sample) },
        { "test_double", r.testDouble } };
}
void fromJson(const Json& j, HelloReply& out)
{
    const std::string w = "hello reply";
    out.protocol = intOr(j, "protocol", 0, w);
    out.workerVersion = jsonfield::stringOr(j, "worker_version", "", w);
    out.device = kl::deviceFromJson(jsonfield::require(j, "device", w), w + ".device");
    out.pid = static_cast<long>(jsonfield::integerOr(j, "pid", 0, w, 0));
    out.host = jsonfield::stringOr(j, "host", "", w);
    out.cupti = jsonfield::booleanOr(j, "cupti", false, w);
    if (j.contains("sample"))
        out.sample = kl::deviceSampleFromJson(j.at("sample"), w + ".sample");
    out.testDouble = jsonfield::booleanOr(j, "test_double", false, w);
}

Json toJson(const PingRequest&)
{
    return op(PingRequest::kOp);
}
void fromJson(const Json&, PingRequest&)
{
}
Json toJson(const PingReply& r)
{
    return { { "busy_op", r.busyOp }, { "busy_seconds", r.busySeconds } };
}
void fromJson(const Json& j, PingReply& out)
{
    out.busyOp = jsonfield::stringOr(j, "busy_op", "", "ping reply");
    out.busySeconds = jsonfield::numberOr(j, "busy_seconds", 0, "ping reply");
}

Json toJson(const SampleRequest&)
{
    return op(SampleRequest::kOp);
}
void fromJson(const Json&, SampleRequest&)
{
}
Json toJson(const SampleReply& r)
{
    return { { "sample", wire::toJson(r.sample) } };
}
void fromJson(const Json& j, SampleReply& out)
{
    out.sample = kl::deviceSampleFromJson(jsonfield::require(j, "sample", "sample reply"), "sample reply.sample");
}

Json toJson(const LoadProblemRequest& r)
{
    Json j = op(LoadProblemRequest::kOp);
    j["problem_json"] = kl::toJson(r.problem);
    j["reference_source"] = r.referenceSource;
    j["baseline_source"] = r.baselineSource;
    return j;
}
void fromJson(const Json& j, LoadProblemRequest& out)
{
    const std::string w = "load_problem";
    out.problem = kl::problemFromJson(jsonfield::require(j, "problem_json", w), w + ".problem_json");
    out.referenceSource = jsonfield::string(j, "reference_source", w);
    out.baselineSource = jsonfield::string(j, "baseline_source", w);
}
Json toJson(const LoadProblemReply& r)
{
    Json tolerances = Json::object();
    for (const auto& t : r.tolerances)
        tolerances[t.output] = wire::toJson(t);
    return { { "problem", r.problem }, { "baseline_kind", r.baselineKind },
        { "reference_compile", wire::toJson(r.referenceCompile) },
        { "baseline_compile", wire::toJson(r.baselineCompile) }, { "tolerances", tolerances } };
}
void fromJson(const Json& j, LoadProblemReply& out)
{
    const std::string w = "load_problem reply";
    out.problem = jsonfield::string(j, "problem", w);
    out.baselineKind = jsonfield::stringOr(j, "baseline_kind", "", w);
    if (j.contains("reference_compile"))
        out.referenceCompile = kl::compileReportFromJson(j.at("reference_compile"), w + ".reference_compile");
    if (j.contains("baseline_compile"))
        out.baselineCompile = kl::compileReportFromJson(j.at("baseline_compile"), w + ".baseline_compile");
    if (j.contains("tolerances")) {
        const Json& t = j.at("tolerances");
        if (!t.is_object())
            throw InputError(w + ".tolerances: expected an object");
        for (auto it = t.begin(); it != t.end(); ++it)
            out.tolerances.push_back(outputTolerance(it.value(), w + ".tolerances." + it.key()));
    }
}

Json toJson(const CompileRequest& r)
{
    Json j = op(CompileRequest::kOp);
    j["candidate"] = wire::toJson(r.candidate);
    return j;
}
void fromJson(const Json& j, CompileRequest& out)
{
    out.candidate = candidateOf(j, "compile");
}
Json toJson(const CompileReply& r)
{
    return { { "report", wire::toJson(r.report) }, { "key", r.key } };
}
void fromJson(const Json& j, CompileReply& out)
{
    const std::string w = "compile reply";
    out.report = kl::compileReportFromJson(jsonfield::require(j, "report", w), w + ".report");
    out.key = jsonfield::stringOr(j, "key", "", w);
}

Json toJson(const VerifyRequest& r)
{
    Json j = runOp(VerifyRequest::kOp, r.problem, r.candidate);
    Json shapes = Json::array();
    for (std::size_t i = 0; i < r.shapes.size(); ++i) {
        Json s = wire::toJson(r.shapes[i]);
        s["held_out"] = i < r.heldOut.size() && r.heldOut[i];
        shapes.push_back(s);
    }
    j["shapes"] = shapes;
    j["seed"] = r.seed;
    j["cupti"] = r.cupti;
    j["graph_check"] = r.graphCheck;
    return j;
}
void fromJson(const Json& j, VerifyRequest& out)
{
    const std::string w = "verify";
    out.problem = problemName(j, w);
    out.candidate = candidateOf(j, w);
    const Json& shapes = arrayField(j, "shapes", w);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        out.shapes.push_back(kl::shapeFromJson(shapes[i], at(w, "shapes", i)));
        out.heldOut.push_back(jsonfield::booleanOr(shapes[i], "held_out", false, at(w, "shapes", i)));
    }
    out.seed = seedOf(j, w);
    out.cupti = jsonfield::booleanOr(j, "cupti", true, w);
    out.graphCheck = jsonfield::booleanOr(j, "graph_check", true, w);
}
Json toJson(const VerifyReply& r)
{
    Json j = { { "compile", wire::toJson(r.compile) } };
    if (!r.ran)
        return j;
    j["shapes"] = array(r.shapes);
    j["reasons"] = array(r.reasons);
    j["kernel_records"] = r.kernelRecords;
    j["cupti_checked"] = r.cuptiChecked;
    return j;
}
void fromJson(const Json& j, VerifyReply& out)
{
    const std::string w = "verify reply";
    out.compile = replyCompile(j, w);
    out.ran = j.contains("shapes");
    if (!out.ran)
        return;
    const Json& shapes = arrayField(j, "shapes", w);
    for (std::size_t i = 0; i < shapes.size(); ++i)
        out.shapes.push_back(kl::shapeResultFromJson(shapes[i], at(w, "shapes", i)));
    out.reasons = reasons(j, w);
    out.kernelRecords = jsonfield::integerOr(j, "kernel_records", 0, w, 0);
    out.cuptiChecked = jsonfield::booleanOr(j, "cupti_checked", false, w);
}

Json toJson(const TimeRequest& r)
{
    Json j = runOp(TimeRequest::kOp, r.problem, r.candidate);
    j["shapes"] = array(r.shapes);
    j["baseline"] = r.baseline;
    j["max_seconds_per_shape"] = r.maxSecondsPerShape;
    j["target_rel_ci"] = r.targetRelCi;
    j["min_samples"] = r.minSamples;
    j["max_samples"] = r.maxSamples;
    j["graph_mode"] = r.graphMode;
    j["recheck"] = r.recheck;
    j["graph_timing"] = r.graphTiming;
    j["seed"] = r.seed;
    j["return_samples"] = r.returnSamples;
    return j;
}
void fromJson(const Json& j, TimeRequest& out)
{
    const std::string w = "time";
    out.problem = problemName(j, w);
    out.candidate = candidateOf(j, w);
    const Json& shapes = arrayField(j, "shapes", w);
    for (std::size_t i = 0; i < shapes.size(); ++i)
        out.shapes.push_back(kl::shapeFromJson(shapes[i], at(w, "shapes", i)));
    out.baseline = jsonfield::booleanOr(j, "baseline", true, w);
    out.maxSecondsPerShape = jsonfield::numberOr(j, "max_seconds_per_shape", 2.0, w);
    out.targetRelCi = jsonfield::numberOr(j, "target_rel_ci", 0.01, w);
    out.minSamples = intOr(j, "min_samples", 10, w, 1);
    out.maxSamples = intOr(j, "max_samples", 4000, w, 1);
    out.graphMode = jsonfield::stringOr(j, "graph_mode", "auto", w);
    if (!isGraphMode(out.graphMode))
        throw InputError(w + ".graph_mode: '" + out.graphMode + "' is not auto, always or never");
    out.recheck = jsonfield::booleanOr(j, "recheck", true, w);
    out.graphTiming = jsonfield::booleanOr(j, "graph_timing", true, w);
    out.seed = seedOf(j, w);
    out.returnSamples = jsonfield::booleanOr(j, "return_samples", false, w);
}
Json toJson(const TimeReply& r)
{
    Json j = { { "compile", wire::toJson(r.compile) } };
    if (!r.ran)
        return j;
    Json shapes = Json::array();
    for (const auto& s : r.shapes) {
        Json e = wire::toJson(s.result);
        e["before"] = wire::toJson(s.before);
        e["after"] = wire::toJson(s.after);
        e["throttled"] = s.throttled;
        e["input_sets"] = s.inputSets;
        e["output_sets"] = s.outputSets;
        e["checked_batches"] = s.checkedBatches;
        e["rotation_bytes"] = s.rotationBytes;
        if (!s.candidateSamplesUs.empty() || !s.baselineSamplesUs.empty()) {
            e["candidate_samples_us"] = s.candidateSamplesUs;
            e["baseline_samples_us"] = s.baselineSamplesUs;
        }
        shapes.push_back(e);
    }
    j["shapes"] = shapes;
    j["reasons"] = array(r.reasons);
    return j;
}
void fromJson(const Json& j, TimeReply& out)
{
    const std::string w = "time reply";
    out.compile = replyCompile(j, w);
    out.ran = j.contains("shapes");
    if (!out.ran)
        return;
    const Json& shapes = arrayField(j, "shapes", w);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        const std::string sw = at(w, "shapes", i);
        const Json& e = shapes[i];
        TimedShape s;
        s.result = kl::shapeResultFromJson(e, sw);
        if (e.contains("before"))
            s.before = kl::deviceSampleFromJson(e.at("before"), sw + ".before");
        if (e.contains("after"))
            s.after = kl::deviceSampleFromJson(e.at("after"), sw + ".after");
        s.throttled = jsonfield::booleanOr(e, "throttled", false, sw);
        s.inputSets = intOr(e, "input_sets", 0, sw);
        s.outputSets = intOr(e, "output_sets", 0, sw);
        s.checkedBatches = intOr(e, "checked_batches", 0, sw);
        s.rotationBytes = static_cast<std::uint64_t>(jsonfield::integerOr(e, "rotation_bytes", 0, sw, 0));
        s.candidateSamplesUs = numbers(e, "candidate_samples_us", sw);
        s.baselineSamplesUs = numbers(e, "baseline_samples_us", sw);
        out.shapes.push_back(std::move(s));
    }
    out.reasons = reasons(j, w);
}

Json toJson(const TraceRequest& r)
{
    Json j = runOp(TraceRequest::kOp, r.problem, r.candidate);
    j["shape"] = wire::toJson(r.shape);
    j["launches"] = r.launches;
    return j;
}
void fromJson(const Json& j, TraceRequest& out)
{
    const std::string w = "trace";
    out.problem = problemName(j, w);
    out.candidate = candidateOf(j, w);
    out.shape = kl::shapeFromJson(jsonfield::require(j, "shape", w), w + ".shape");
    out.launches = intOr(j, "launches", 50, w, 1, 100000);
}
Json toJson(const TraceReply& r)
{
    Json j = { { "compile", wire::toJson(r.compile) } };
    if (!r.ran)
        return j;
    j["records"] = array(r.records);
    j["event_us"] = r.eventUs;
    j["cupti"] = r.cupti;
    return j;
}
void fromJson(const Json& j, TraceReply& out)
{
    const std::string w = "trace reply";
    out.compile = replyCompile(j, w);
    out.ran = j.contains("records");
    if (!out.ran)
        return;
    const Json& records = arrayField(j, "records", w);
    for (std::size_t i = 0; i < records.size(); ++i)
        out.records.push_back(kernelRecord(records[i], at(w, "records", i)));
    out.eventUs = numbers(j, "event_us", w);
    out.cupti = jsonfield::booleanOr(j, "cupti", false, w);
}

Json toJson(const ProfileOpRequest& r)
{
    Json j = runOp(ProfileOpRequest::kOp, r.problem, r.candidate);
    j["shape"] = wire::toJson(r.shape);
    j["sol"] = r.sol;
    j["trace"] = r.trace;
    j["launches"] = r.launches;
    return j;
}
void fromJson(const Json& j, ProfileOpRequest& out)
{
    const std::string w = "profile";
    out.problem = problemName(j, w);
    out.candidate = candidateOf(j, w);
    out.shape = kl::shapeFromJson(jsonfield::require(j, "shape", w), w + ".shape");
    out.sol = jsonfield::booleanOr(j, "sol", true, w);
    out.trace = jsonfield::booleanOr(j, "trace", true, w);
    out.launches = intOr(j, "launches", 5, w, 1, 1000);
}
Json toJson(const ProfileOpReply& r)
{
    if (!r.report)
        return { { "compile", wire::toJson(r.compile) } };
    ProfileReport report = *r.report;
    report.compile = r.compile;
    return wire::toJson(report);
}
void fromJson(const Json& j, ProfileOpReply& out)
{
    out.compile = replyCompile(j, "profile reply");
    if (j.contains("plans"))
        out.report = profileReport(j, "profile reply");
}

Json toJson(const PipelineRequest& r)
{
    Json j = op(PipelineRequest::kOp);
    j["pipeline"] = r.pipeline;
    Json stages = Json::array();
    for (const auto& st : r.stages) {
        Json e = { { "impl", st.impl }, { "label", st.label } };
        if (st.candidate)
            e["candidate"] = toJson(*st.candidate);
        stages.push_back(std::move(e));
    }
    j["stages"] = stages;
    j["shapes"] = array(r.shapes);
    j["seed"] = r.seed;
    j["max_seconds_per_shape"] = r.maxSecondsPerShape;
    j["target_rel_ci"] = r.targetRelCi;
    j["min_samples"] = r.minSamples;
    j["max_samples"] = r.maxSamples;
    j["stage_samples"] = r.stageSamples;
    return j;
}
void fromJson(const Json& j, PipelineRequest& out)
{
    const std::string w = "pipeline";
    out.pipeline = jsonfield::require(j, "pipeline", w);
    if (!out.pipeline.is_object())
        throw InputError(w + ".pipeline: expected pipeline.json's object");
    const Json& stages = arrayField(j, "stages", w);
    for (std::size_t i = 0; i < stages.size(); ++i) {
        const std::string sw = at(w, "stages", i);
        PipelineStageWire st;
        st.impl = jsonfield::string(stages[i], "impl", sw);
        if (st.impl != "baseline" && st.impl != "library" && st.impl != "reference" && st.impl != "candidate")
            throw InputError(sw + ".impl: '" + st.impl + "' is not baseline, library, reference or candidate");
        st.label = jsonfield::stringOr(stages[i], "label", st.impl, sw);
        if (st.impl == "candidate")
            st.candidate = candidateWire(jsonfield::require(stages[i], "candidate", sw), sw + ".candidate");
        out.stages.push_back(std::move(st));
    }
    const Json& shapes = arrayField(j, "shapes", w);
    for (std::size_t i = 0; i < shapes.size(); ++i)
        out.shapes.push_back(kl::shapeFromJson(shapes[i], at(w, "shapes", i)));
    out.seed = seedOf(j, w);
    out.maxSecondsPerShape = jsonfield::numberOr(j, "max_seconds_per_shape", 2.0, w);
    out.targetRelCi = jsonfield::numberOr(j, "target_rel_ci", 0.01, w);
    out.minSamples = intOr(j, "min_samples", 10, w, 1);
    out.maxSamples = intOr(j, "max_samples", 2000, w, 1);
    out.stageSamples = intOr(j, "stage_samples", 24, w, 1, 100000);
}
Json toJson(const PipelineReply& r)
{
    Json j = { { "compiles", array(r.compiles) } };
    if (r.ran)
        j["result"] = kl::toJson(r.result);
    return j;
}
void fromJson(const Json& j, PipelineReply& out)
{
    const std::string w = "pipeline reply";
    const Json& compiles = arrayField(j, "compiles", w);
    for (std::size_t i = 0; i < compiles.size(); ++i)
        out.compiles.push_back(kl::compileReportFromJson(compiles[i], at(w, "compiles", i)));
    out.ran = j.contains("result");
    if (out.ran)
        out.result = kl::pipelineResultFromJson(j.at("result"), w + ".result");
}

Json toJson(const ShutdownRequest&)
{
    return op(ShutdownRequest::kOp);
}
void fromJson(const Json&, ShutdownRequest&)
{
}
Json toJson(const ShutdownReply&)
{
    return Json::object();
}
void fromJson(const Json&, ShutdownReply&)
{
}

std::string versionMismatch(const HelloReply& hello, const std::string& workerName, const std::string& installHint)
{
    if (hello.protocol == kProtocolVersion)
        return {};
    const std::string theirs
        = hello.workerVersion.empty() ? std::string("an older kloop-worker") : "kloop-worker " + hello.workerVersion;
    return "worker " + workerName + " speaks protocol " + std::to_string(hello.protocol) + " (" + theirs
        + "), this kloop speaks protocol " + std::to_string(kProtocolVersion) + " (kloop " + softwareVersion()
        + "); install the matching worker on that host: " + installHint;
}

} // namespace kl::wire
