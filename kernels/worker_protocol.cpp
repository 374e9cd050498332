#include "kernels/worker_protocol.h"

#include "core/errors.h"
#include "core/json_io.h"

#include <cmath>
#include <stdexcept>

namespace kl::wire {

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
