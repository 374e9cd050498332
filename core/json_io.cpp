#include "core/json_io.h"

#include "core/errors.h"
#include "core/json_fields.h"
#include "core/session_store.h"

#include <cmath>
#include <filesystem>

namespace kl {

namespace jsonfield {

    const Json& require(const Json& j, const char* key, const std::string& where)
    {
        if (!j.is_object())
            throw InputError(where + ": expected a JSON object");
        const auto it = j.find(key);
        if (it == j.end())
            throw InputError(where + "." + key + ": missing");
        return *it;
    }

    std::string string(const Json& j, const char* key, const std::string& where)
    {
        const Json& v = require(j, key, where);
        if (!v.is_string())
            throw InputError(where + "." + key + ": expected a string, got " + v.type_name());
        return v.get<std::string>();
    }

    std::string stringOr(const Json& j, const char* key, const std::string& fallback, const std::string& where)
    {
        if (!j.is_object() || !j.contains(key) || j.at(key).is_null())
            return fallback;
        return string(j, key, where);
    }

    static std::int64_t asInteger(const Json& v, const std::string& path, std::int64_t min, std::int64_t max)
    {
        std::int64_t x = 0;
        if (v.is_number_unsigned()) {
            const auto u = v.get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(INT64_MAX))
                throw InputError(path + ": number too large");
            x = static_cast<std::int64_t>(u);
        } else if (v.is_number_integer()) {
            x = v.get<std::int64_t>();
        } else if (v.is_number_float()) {
            const double d = v.get<double>();
            if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15)
                throw InputError(path + ": expected an integer, got " + v.dump());
            x = static_cast<std::int64_t>(d);
        } else {
            throw InputError(path + ": expected an integer, got " + std::string(v.type_name()));
        }
        if (x < min || x > max)
            throw InputError(path + ": " + std::to_string(x) + " is outside [" + std::to_string(min) + ", "
                + std::to_string(max) + "]");
        return x;
    }

    std::int64_t integer(const Json& j, const char* key, const std::string& where, std::int64_t min, std::int64_t max)
    {
        return asInteger(require(j, key, where), where + "." + key, min, max);
    }

    std::int64_t integerOr(const Json& j, const char* key, std::int64_t fallback, const std::string& where,
        std::int64_t min, std::int64_t max)
    {
        if (!j.is_object() || !j.contains(key) || j.at(key).is_null())
            return fallback;
        return integer(j, key, where, min, max);
    }

    double number(const Json& j, const char* key, const std::string& where)
    {
        const Json& v = require(j, key, where);
        if (!v.is_number())
            throw InputError(where + "." + key + ": expected a number, got " + v.type_name());
        const double d = v.get<double>();
        if (!std::isfinite(d))
            throw InputError(where + "." + key + ": not finite");
        return d;
    }

    double numberOr(const Json& j, const char* key, double fallback, const std::string& where)
    {
        if (!j.is_object() || !j.contains(key) || j.at(key).is_null())
            return fallback;
        return number(j, key, where);
    }

    bool booleanOr(const Json& j, const char* key, bool fallback, const std::string& where)
    {
        if (!j.is_object() || !j.contains(key) || j.at(key).is_null())
            return fallback;
        const Json& v = j.at(key);
        if (!v.is_boolean())
            throw InputError(where + "." + key + ": expected true or false, got " + v.type_name());
        return v.get<bool>();
    }

    const Json& arrayField(const Json& j, const char* key, const std::string& where)
    {
        const Json& v = require(j, key, where);
        if (!v.is_array())
            throw InputError(where + "." + key + ": expected an array, got " + v.type_name());
        return v;
    }

    const Json* optionalArray(const Json& j, const char* key, const std::string& where)
    {
        if (!j.is_object() || !j.contains(key) || j.at(key).is_null())
            return nullptr;
        return &arrayField(j, key, where);
    }

    const Json* optionalObject(const Json& j, const char* key, const std::string& where)
    {
        if (!j.is_object() || !j.contains(key) || j.at(key).is_null())
            return nullptr;
        const Json& v = j.at(key);
        if (!v.is_object())
            throw InputError(where + "." + key + ": expected an object, got " + v.type_name());
        return &v;
    }

    Expr exprField(const Json& j, const char* key, const std::string& where, const char* fallback)
    {
        std::string text;
        if (fallback && (!j.contains(key) || j.at(key).is_null()))
            text = fallback;
        else {
            const Json& v = require(j, key, where);
            if (v.is_number_integer())
                text = std::to_string(v.get<std::int64_t>());
            else if (v.is_string())
                text = v.get<std::string>();
            else
                throw InputError(where + "." + key + ": expected an expression string");
        }
        try {
            return Expr::parse(text);
        } catch (const ExprError& e) {
            throw InputError(where + "." + key + ": " + e.what());
        }
    }

    Json readJsonFile(const std::filesystem::path& file, std::size_t maxBytes)
    {
        std::string text;
        try {
            text = readFile(file, maxBytes);
        } catch (const std::exception& e) {
            throw InputError(file.string() + ": " + e.what());
        }
        try {
            return Json::parse(text);
        } catch (const Json::parse_error& e) {
            throw InputError(file.string() + ": not valid JSON (byte " + std::to_string(e.byte) + ")");
        } catch (const Json::exception& e) {
            throw InputError(file.string() + ": " + e.what());
        }
    }

} // namespace jsonfield

using namespace jsonfield;

namespace {

    Json paramsToJson(const ParamValues& p)
    {
        Json j = Json::object();
        for (const auto& [k, v] : p)
            j[k] = v;
        return j;
    }

    ParamValues paramsFromJson(const Json& j, const std::string& where)
    {
        if (!j.is_object())
            throw InputError(where + ": expected an object of parameter values");
        ParamValues p;
        for (const auto& [k, v] : j.items()) {
            if (k.empty() || k.size() > 64)
                throw InputError(where + ": bad parameter name");
            p[k] = jsonfield::asInteger(v, where + "." + k, INT32_MIN, INT32_MAX);
        }
        return p;
    }

    // A screen is written as {"screen_samples": S, "screen_shapes": K}; the full protocol is not written at all,
    // so stores and tuning databases from before multi-fidelity search read as full-protocol measurements.
    void putFidelity(Json& j, const Fidelity& f)
    {
        if (f.screen())
            j["fidelity"] = { { "screen_samples", f.screenSamples }, { "screen_shapes", f.screenShapes } };
    }

    Fidelity fidelityOf(const Json& j, const std::string& where)
    {
        Fidelity f;
        if (!j.contains("fidelity"))
            return f;
        const Json& o = j.at("fidelity");
        const std::string w = where + ".fidelity";
        if (!o.is_object())
            throw InputError(w + ": expected an object");
        f.screenSamples = static_cast<int>(integer(o, "screen_samples", w, 1, 1'000'000));
        f.screenShapes = static_cast<int>(integerOr(o, "screen_shapes", 0, w, 0, 1'000'000));
        return f;
    }

} // namespace

Json toJson(const Candidate& c, bool withSource)
{
    Json j = { { "id", c.id }, { "parent", c.parentId }, { "params", paramsToJson(c.params) },
        { "author", authorName(c.author) }, { "agent", c.agent }, { "hypothesis", c.hypothesisId },
        { "status", statusName(c.status) }, { "status_reason", c.statusReason }, { "created_ms", c.createdMs },
        { "source_sha256", c.sourceHash } };
    if (withSource)
        j["source"] = c.source;
    putFidelity(j, c.fidelity);
    return j;
}

Candidate candidateFromJson(const Json& j, const std::string& where)
{
    Candidate c;
    c.id = string(j, "id", where);
    if (!isSafeId(c.id))
        throw InputError(where + ".id: '" + abbreviate(c.id) + "' is not a safe candidate id");
    c.parentId = stringOr(j, "parent", "", where);
    if (!c.parentId.empty() && !isSafeId(c.parentId))
        throw InputError(where + ".parent: '" + abbreviate(c.parentId) + "' is not a safe candidate id");
    if (j.contains("params"))
        c.params = paramsFromJson(j.at("params"), where + ".params");
    c.author = authorFromName(stringOr(j, "author", "human", where));
    c.agent = stringOr(j, "agent", "", where);
    c.hypothesisId = stringOr(j, "hypothesis", "", where);
    try {
        c.status = statusFromName(stringOr(j, "status", "proposed", where));
    } catch (const InputError& e) {
        throw InputError(where + ".status: " + e.what());
    }
    c.statusReason = stringOr(j, "status_reason", "", where);
    c.createdMs = integerOr(j, "created_ms", 0, where, 0);
    c.sourceHash = stringOr(j, "source_sha256", "", where);
    c.source = stringOr(j, "source", "", where);
    c.fidelity = fidelityOf(j, where);
    return c;
}

Json toJson(const Hypothesis& h)
{
    return { { "id", h.id }, { "text", h.text }, { "author", authorName(h.author) }, { "created_ms", h.createdMs } };
}

Hypothesis hypothesisFromJson(const Json& j, const std::string& where)
{
    Hypothesis h;
    h.id = string(j, "id", where);
    if (!isSafeId(h.id))
        throw InputError(where + ".id: '" + abbreviate(h.id) + "' is not a safe id");
    h.text = string(j, "text", where);
    h.author = authorFromName(stringOr(j, "author", "human", where));
    h.createdMs = integerOr(j, "created_ms", 0, where, 0);
    return h;
}

Json toJson(const ReviewDecision& r)
{
    return { { "candidate", r.candidateId }, { "approved", r.approved }, { "reason", r.reason },
        { "decided_ms", r.decidedMs } };
}

ReviewDecision reviewFromJson(const Json& j, const std::string& where)
{
    ReviewDecision r;
    r.candidateId = string(j, "candidate", where);
    r.approved = booleanOr(j, "approved", false, where);
    r.reason = stringOr(j, "reason", "", where);
    r.decidedMs = integerOr(j, "decided_ms", 0, where, 0);
    return r;
}

Json toJson(const DeviceInfo& d)
{
    return { { "name", d.name }, { "cc_major", d.ccMajor }, { "cc_minor", d.ccMinor }, { "arch", d.arch },
        { "sm_count", d.smCount }, { "l2_bytes", d.l2Bytes }, { "shared_per_block", d.sharedPerBlock },
        { "shared_per_block_optin", d.sharedPerBlockOptin }, { "shared_per_sm", d.sharedPerSm },
        { "regs_per_block", d.regsPerBlock }, { "regs_per_sm", d.regsPerSm },
        { "max_threads_per_block", d.maxThreadsPerBlock }, { "max_threads_per_sm", d.maxThreadsPerSm },
        { "warp_size", d.warpSize }, { "global_mem_bytes", d.globalMemBytes }, { "sm_clock_mhz", d.smClockMHz },
        { "mem_clock_mhz", d.memClockMHz }, { "mem_bus_width_bits", d.memBusWidthBits },
        { "driver_version", d.driverVersion }, { "cuda_driver_api", d.cudaDriverApi },
        { "cuda_runtime", d.cudaRuntime }, { "nvrtc_version", d.nvrtcVersion }, { "uuid", d.uuid },
        { "measured_copy_bandwidth", d.measuredCopyBandwidth } };
}

DeviceInfo deviceFromJson(const Json& j, const std::string& where)
{
    DeviceInfo d;
    if (j.is_null())
        return d;
    const std::int64_t big = std::int64_t(1) << 50;
    d.name = stringOr(j, "name", "", where);
    d.ccMajor = static_cast<int>(integerOr(j, "cc_major", 0, where, 0, 100));
    d.ccMinor = static_cast<int>(integerOr(j, "cc_minor", 0, where, 0, 100));
    d.arch = stringOr(j, "arch", "", where);
    d.smCount = static_cast<int>(integerOr(j, "sm_count", 0, where, 0, 100000));
    d.l2Bytes = integerOr(j, "l2_bytes", 0, where, 0, big);
    d.sharedPerBlock = integerOr(j, "shared_per_block", 0, where, 0, big);
    d.sharedPerBlockOptin = integerOr(j, "shared_per_block_optin", 0, where, 0, big);
    d.sharedPerSm = integerOr(j, "shared_per_sm", 0, where, 0, big);
    d.regsPerBlock = static_cast<int>(integerOr(j, "regs_per_block", 0, where, 0, 1 << 24));
    d.regsPerSm = static_cast<int>(integerOr(j, "regs_per_sm", 0, where, 0, 1 << 24));
    d.maxThreadsPerBlock = static_cast<int>(integerOr(j, "max_threads_per_block", 0, where, 0, 1 << 20));
    d.maxThreadsPerSm = static_cast<int>(integerOr(j, "max_threads_per_sm", 0, where, 0, 1 << 20));
    d.warpSize = static_cast<int>(integerOr(j, "warp_size", 32, where, 1, 1024));
    d.globalMemBytes = integerOr(j, "global_mem_bytes", 0, where, 0, big);
    d.smClockMHz = static_cast<int>(integerOr(j, "sm_clock_mhz", 0, where, 0, 100000));
    d.memClockMHz = static_cast<int>(integerOr(j, "mem_clock_mhz", 0, where, 0, 100000));
    d.memBusWidthBits = static_cast<int>(integerOr(j, "mem_bus_width_bits", 0, where, 0, 1 << 20));
    d.driverVersion = stringOr(j, "driver_version", "", where);
    d.cudaDriverApi = stringOr(j, "cuda_driver_api", "", where);
    d.cudaRuntime = stringOr(j, "cuda_runtime", "", where);
    d.nvrtcVersion = stringOr(j, "nvrtc_version", "", where);
    d.uuid = stringOr(j, "uuid", "", where);
    d.measuredCopyBandwidth = numberOr(j, "measured_copy_bandwidth", 0, where);
    return d;
}

Json toJson(const DeviceSample& d)
{
    return { { "sm_clock_mhz", d.smClockMHz }, { "mem_clock_mhz", d.memClockMHz }, { "temperature_c", d.temperatureC },
        { "power_w", d.powerW }, { "throttle_reasons", d.throttleReasons }, { "throttle_text", d.throttleText },
        { "available", d.available } };
}

DeviceSample deviceSampleFromJson(const Json& j, const std::string& where)
{
    DeviceSample d;
    if (j.is_null())
        return d;
    d.smClockMHz = static_cast<int>(integerOr(j, "sm_clock_mhz", 0, where, 0, 100000));
    d.memClockMHz = static_cast<int>(integerOr(j, "mem_clock_mhz", 0, where, 0, 100000));
    d.temperatureC = static_cast<int>(integerOr(j, "temperature_c", 0, where, -100, 1000));
    d.powerW = numberOr(j, "power_w", 0, where);
    d.throttleReasons = static_cast<std::uint64_t>(integerOr(j, "throttle_reasons", 0, where, 0));
    d.throttleText = stringOr(j, "throttle_text", "", where);
    d.available = booleanOr(j, "available", false, where);
    return d;
}

Json toJson(const Shape& s)
{
    Json dims = Json::object();
    for (const auto& [k, v] : s.dims)
        dims[k] = v;
    return { { "dims", dims }, { "weight", s.weight } };
}

Shape shapeFromJson(const Json& j, const std::string& where)
{
    Shape s;
    const Json& dims = require(j, "dims", where);
    if (!dims.is_object() || dims.empty())
        throw InputError(where + ".dims: expected a non-empty object of dim values");
    for (const auto& [k, v] : dims.items())
        s.dims[k] = jsonfield::asInteger(v, where + ".dims." + abbreviate(k), 0, std::int64_t(1) << 40);
    s.weight = numberOr(j, "weight", 1.0, where);
    if (s.weight < 0)
        throw InputError(where + ".weight: must not be negative");
    return s;
}

Json toJson(const SessionSettings& s)
{
    Json extra = Json::object();
    for (const auto& [k, v] : s.extra)
        extra[k] = v;
    return { { "objective", s.objective }, { "regimes", s.regimes }, { "agent", s.agent },
        { "budget",
            { { "max_evaluations", s.budget.maxEvaluations }, { "max_minutes", s.budget.maxMinutes },
                { "convergence_window", s.budget.convergenceWindow } } },
        { "review_jump_factor", s.reviewJumpFactor }, { "auto_approve_llm", s.autoApproveLlm }, { "extra", extra } };
}

SessionSettings settingsFromJson(const Json& j, const std::string& where)
{
    SessionSettings s;
    if (j.is_null())
        return s;
    s.objective = stringOr(j, "objective", s.objective, where);
    s.regimes = stringOr(j, "regimes", "single", where); // absent: written before regimes, one best over every shape
    if (!SessionSettings::isKnownRegimes(s.regimes))
        throw InputError(where + ".regimes: '" + abbreviate(s.regimes)
            + "' is not a regime setting (\"problem\": a best per regime of problem.json; \"single\": one best)");
    s.agent = stringOr(j, "agent", "", where);
    if (const Json* b = optionalObject(j, "budget", where)) {
        s.budget.maxEvaluations
            = static_cast<int>(integerOr(*b, "max_evaluations", 0, where + ".budget", 0, 100000000));
        s.budget.maxMinutes = numberOr(*b, "max_minutes", 0, where + ".budget");
        s.budget.convergenceWindow
            = static_cast<int>(integerOr(*b, "convergence_window", 0, where + ".budget", 0, 100000000));
    }
    s.reviewJumpFactor = numberOr(j, "review_jump_factor", 2.0, where);
    s.autoApproveLlm = booleanOr(j, "auto_approve_llm", false, where);
    if (const Json* e = optionalObject(j, "extra", where))
        for (const auto& [k, v] : e->items()) {
            if (!v.is_string())
                throw InputError(where + ".extra." + k + ": expected a string");
            s.extra[k] = v.get<std::string>();
        }
    return s;
}

Json toJson(const TimingStats& t)
{
    return { { "median_us", t.medianUs }, { "p10_us", t.p10Us }, { "p90_us", t.p90Us }, { "ci_low_us", t.ciLowUs },
        { "ci_high_us", t.ciHighUs }, { "samples", t.samples }, { "graph_mode", t.graphMode },
        { "launches_per_sample", t.launchesPerSample }, { "input_sets", t.inputSets }, { "throttled", t.throttled },
        { "device", toJson(t.device) } };
}

TimingStats timingFromJson(const Json& j, const std::string& where)
{
    TimingStats t;
    t.medianUs = number(j, "median_us", where);
    t.p10Us = numberOr(j, "p10_us", t.medianUs, where);
    t.p90Us = numberOr(j, "p90_us", t.medianUs, where);
    t.ciLowUs = numberOr(j, "ci_low_us", t.medianUs, where);
    t.ciHighUs = numberOr(j, "ci_high_us", t.medianUs, where);
    t.samples = static_cast<int>(integerOr(j, "samples", 0, where, 0, 100000000));
    t.graphMode = booleanOr(j, "graph_mode", false, where);
    t.launchesPerSample = static_cast<int>(integerOr(j, "launches_per_sample", 1, where, 1, 100000000));
    t.inputSets = static_cast<int>(integerOr(j, "input_sets", 0, where, 0, 100000000));
    t.throttled = booleanOr(j, "throttled", false, where);
    if (j.contains("device"))
        t.device = deviceSampleFromJson(j.at("device"), where + ".device");
    return t;
}

Json toJson(const VerdictReason& r)
{
    Json j = { { "rule", r.rule }, { "message", r.message }, { "blocking", r.blocking } };
    if (r.line > 0)
        j["line"] = r.line;
    return j;
}

VerdictReason reasonFromJson(const Json& j, const std::string& where)
{
    VerdictReason r;
    r.rule = string(j, "rule", where);
    r.message = stringOr(j, "message", "", where);
    r.line = static_cast<int>(integerOr(j, "line", 0, where, 0, 100000000));
    r.blocking = booleanOr(j, "blocking", true, where);
    return r;
}

Json toJson(const CorrectnessStats& c)
{
    return { { "rel_l2", c.relL2 }, { "max_abs", c.maxAbs }, { "non_finite", c.nonFinite },
        { "full_coverage", c.fullCoverage }, { "canaries_intact", c.canariesIntact },
        { "inputs_unchanged", c.inputsUnchanged }, { "seed", c.seed }, { "distribution", c.distribution },
        { "passed", c.passed } };
}

CorrectnessStats correctnessFromJson(const Json& j, const std::string& where)
{
    CorrectnessStats c;
    c.relL2 = numberOr(j, "rel_l2", 0, where);
    c.maxAbs = numberOr(j, "max_abs", 0, where);
    c.nonFinite = booleanOr(j, "non_finite", false, where);
    c.fullCoverage = booleanOr(j, "full_coverage", true, where);
    c.canariesIntact = booleanOr(j, "canaries_intact", true, where);
    c.inputsUnchanged = booleanOr(j, "inputs_unchanged", true, where);
    if (j.contains("seed")) {
        if (!j.at("seed").is_number_unsigned() && !j.at("seed").is_number_integer())
            throw InputError(where + ".seed: expected an integer");
        c.seed = j.at("seed").get<std::uint64_t>();
    }
    c.distribution = stringOr(j, "distribution", "", where);
    c.passed = booleanOr(j, "passed", false, where);
    return c;
}

Json toJson(const CompileReport& r)
{
    Json kernels = Json::array();
    for (const auto& k : r.kernels)
        kernels.push_back({ { "kernel", k.kernel }, { "registers", k.registers }, { "spill_stores", k.spillStores },
            { "spill_loads", k.spillLoads }, { "static_shared_bytes", k.staticSharedBytes },
            { "local_bytes", k.localBytes }, { "max_threads_per_block", k.maxThreadsPerBlock } });
    return { { "ok", r.ok }, { "log", r.log }, { "compile_ms", r.compileMs }, { "cache_hit", r.cacheHit },
        { "kernels", kernels } };
}

CompileReport compileReportFromJson(const Json& j, const std::string& where)
{
    CompileReport r;
    if (j.is_null())
        return r;
    r.ok = booleanOr(j, "ok", false, where);
    r.log = stringOr(j, "log", "", where);
    r.compileMs = numberOr(j, "compile_ms", 0, where);
    r.cacheHit = booleanOr(j, "cache_hit", false, where);
    if (const Json* ks = optionalArray(j, "kernels", where)) {
        int i = 0;
        for (const auto& k : *ks) {
            const std::string w = where + ".kernels[" + std::to_string(i++) + "]";
            CompileReport::KernelResources kr;
            kr.kernel = string(k, "kernel", w);
            kr.registers = static_cast<int>(integerOr(k, "registers", 0, w, 0, 1 << 20));
            kr.spillStores = static_cast<int>(integerOr(k, "spill_stores", 0, w, 0, 1 << 30));
            kr.spillLoads = static_cast<int>(integerOr(k, "spill_loads", 0, w, 0, 1 << 30));
            kr.staticSharedBytes = static_cast<int>(integerOr(k, "static_shared_bytes", 0, w, 0, 1 << 30));
            kr.localBytes = static_cast<int>(integerOr(k, "local_bytes", 0, w, 0, 1 << 30));
            kr.maxThreadsPerBlock = static_cast<int>(integerOr(k, "max_threads_per_block", 0, w, 0, 1 << 20));
            r.kernels.push_back(kr);
        }
    }
    return r;
}

Json toJson(const ShapeResult& s)
{
    Json checks = Json::array();
    for (const auto& c : s.checks)
        checks.push_back(toJson(c));
    Json js = { { "shape", toJson(s.shape) }, { "held_out", s.heldOut }, { "checks", checks }, { "correct", s.correct },
        { "speedup", s.speedup }, { "speedup_ci_low", s.speedupCiLow }, { "speedup_ci_high", s.speedupCiHigh } };
    if (s.timing)
        js["timing"] = toJson(*s.timing);
    if (s.baselineTiming)
        js["baseline_timing"] = toJson(*s.baselineTiming);
    if (s.graphTiming)
        js["graph_timing"] = toJson(*s.graphTiming);
    if (s.verifyMs > 0)
        js["verify_ms"] = s.verifyMs;
    return js;
}

ShapeResult shapeResultFromJson(const Json& s, const std::string& w)
{
    ShapeResult r;
    r.shape = shapeFromJson(require(s, "shape", w), w + ".shape");
    r.heldOut = booleanOr(s, "held_out", false, w);
    if (const Json* cs = optionalArray(s, "checks", w)) {
        int k = 0;
        for (const auto& c : *cs)
            r.checks.push_back(correctnessFromJson(c, w + ".checks[" + std::to_string(k++) + "]"));
    }
    r.correct = booleanOr(s, "correct", false, w);
    r.speedup = numberOr(s, "speedup", 0, w);
    r.speedupCiLow = numberOr(s, "speedup_ci_low", 0, w);
    r.speedupCiHigh = numberOr(s, "speedup_ci_high", 0, w);
    if (const Json* t = optionalObject(s, "timing", w))
        r.timing = timingFromJson(*t, w + ".timing");
    if (const Json* t = optionalObject(s, "baseline_timing", w))
        r.baselineTiming = timingFromJson(*t, w + ".baseline_timing");
    if (const Json* t = optionalObject(s, "graph_timing", w))
        r.graphTiming = timingFromJson(*t, w + ".graph_timing");
    r.verifyMs = numberOr(s, "verify_ms", 0, w);
    return r;
}

Json toJson(const Evaluation& e)
{
    Json reasons = Json::array();
    for (const auto& r : e.reasons)
        reasons.push_back(toJson(r));
    Json shapes = Json::array();
    for (const auto& s : e.shapes)
        shapes.push_back(toJson(s));
    Json j = { { "candidate", e.candidateId }, { "verdict", verdictName(e.verdict) }, { "reasons", reasons },
        { "compile", toJson(e.compile) }, { "shapes", shapes }, { "objective", e.objective },
        { "objective_ci_low", e.objectiveCiLow }, { "objective_ci_high", e.objectiveCiHigh },
        { "device_before", toJson(e.deviceBefore) }, { "device_after", toJson(e.deviceAfter) },
        { "started_ms", e.startedMs }, { "finished_ms", e.finishedMs } };
    for (const RegimeResult& r : e.regimes)
        j["regimes"].push_back({ { "name", r.name }, { "condition", r.condition }, { "objective", r.objective },
            { "objective_ci_low", r.objectiveCiLow }, { "objective_ci_high", r.objectiveCiHigh },
            { "timed_shapes", r.timedShapes }, { "verified_shapes", r.verifiedShapes }, { "won", r.won } });
    if (!e.measuredOn.empty())
        j["measured_on"]
            = { { "worker", e.measuredOn.worker }, { "gpu", e.measuredOn.gpu }, { "uuid", e.measuredOn.uuid } };
    putFidelity(j, e.fidelity);
    if (e.deviceMs > 0)
        j["device_ms"] = e.deviceMs;
    return j;
}

Evaluation evaluationFromJson(const Json& j, const std::string& where)
{
    Evaluation e;
    e.candidateId = string(j, "candidate", where);
    try {
        e.verdict = verdictFromName(string(j, "verdict", where));
    } catch (const InputError& err) {
        throw InputError(where + ".verdict: " + err.what());
    }
    if (const Json* rs = optionalArray(j, "reasons", where)) {
        int i = 0;
        for (const auto& r : *rs)
            e.reasons.push_back(reasonFromJson(r, where + ".reasons[" + std::to_string(i++) + "]"));
    }
    if (j.contains("compile"))
        e.compile = compileReportFromJson(j.at("compile"), where + ".compile");
    if (const Json* ss = optionalArray(j, "shapes", where)) {
        int i = 0;
        for (const auto& s : *ss)
            e.shapes.push_back(shapeResultFromJson(s, where + ".shapes[" + std::to_string(i++) + "]"));
    }
    e.objective = numberOr(j, "objective", 0, where);
    e.objectiveCiLow = numberOr(j, "objective_ci_low", 0, where);
    e.objectiveCiHigh = numberOr(j, "objective_ci_high", 0, where);
    if (j.contains("device_before"))
        e.deviceBefore = deviceSampleFromJson(j.at("device_before"), where + ".device_before");
    if (j.contains("device_after"))
        e.deviceAfter = deviceSampleFromJson(j.at("device_after"), where + ".device_after");
    e.startedMs = integerOr(j, "started_ms", 0, where, 0);
    e.finishedMs = integerOr(j, "finished_ms", 0, where, 0);
    if (const Json* rs = optionalArray(j, "regimes", where)) {
        int i = 0;
        for (const auto& r : *rs) {
            const std::string w = where + ".regimes[" + std::to_string(i++) + "]";
            if (!r.is_object())
                throw InputError(w + ": expected an object");
            RegimeResult rr;
            rr.name = string(r, "name", w);
            rr.condition = stringOr(r, "condition", "", w);
            rr.objective = numberOr(r, "objective", 0, w);
            rr.objectiveCiLow = numberOr(r, "objective_ci_low", 0, w);
            rr.objectiveCiHigh = numberOr(r, "objective_ci_high", 0, w);
            rr.timedShapes = static_cast<int>(integerOr(r, "timed_shapes", 0, w, 0, 100000000));
            rr.verifiedShapes = static_cast<int>(integerOr(r, "verified_shapes", 0, w, 0, 100000000));
            rr.won = booleanOr(r, "won", false, w);
            e.regimes.push_back(std::move(rr));
        }
    }
    if (j.contains("measured_on")) {
        const Json& m = j.at("measured_on");
        const std::string mw = where + ".measured_on";
        if (!m.is_object())
            throw InputError(mw + ": expected an object");
        e.measuredOn.worker = stringOr(m, "worker", "", mw);
        e.measuredOn.gpu = stringOr(m, "gpu", "", mw);
        e.measuredOn.uuid = stringOr(m, "uuid", "", mw);
    }
    e.fidelity = fidelityOf(j, where);
    e.deviceMs = numberOr(j, "device_ms", 0, where);
    if (e.deviceMs < 0)
        throw InputError(where + ".device_ms: negative");
    return e;
}

void dimSpaceFromJson(const Json& j, const std::string& where, Problem& p)
{
    {
        int i = 0;
        for (const auto& d : arrayField(j, "dims", where)) {
            const std::string w = where + ".dims[" + std::to_string(i++) + "]";
            DimSpec ds;
            ds.name = string(d, "name", w);
            if (const auto bad = badProblemName(p, ds.name, "dim"))
                throw InputError(w + ".name: " + *bad);
            ds.min = integer(d, "min", w, 0, std::int64_t(1) << 40);
            ds.max = integer(d, "max", w, ds.min, std::int64_t(1) << 40);
            ds.multipleOf = integerOr(d, "multiple_of", 1, w, 1, std::int64_t(1) << 20);
            ds.logUniform = booleanOr(d, "log_uniform", true, w);
            p.dims.push_back(ds);
        }
    }
    if (const Json* cs = optionalObject(j, "constants", where))
        for (const auto& [name, value] : cs->items()) {
            const std::string w = where + ".constants." + abbreviate(name);
            DimSpec ds;
            ds.name = name;
            if (const auto bad = badProblemName(p, ds.name, "constant"))
                throw InputError(w + ": " + *bad);
            ds.min = ds.max = jsonfield::asInteger(value, w, 1, std::int64_t(1) << 40);
            ds.logUniform = false;
            ds.constant = true;
            p.dims.push_back(ds);
        }
    if (const Json* cs = optionalArray(j, "dim_constraints", where)) {
        int i = 0;
        for (const auto& c : *cs) {
            const std::string w = where + ".dim_constraints[" + std::to_string(i++) + "]";
            if (!c.is_string())
                throw InputError(w + ": expected an expression string");
            try {
                p.dimConstraints.push_back(Expr::parse(c.get<std::string>()));
            } catch (const ExprError& e) {
                throw InputError(w + ": " + e.what());
            }
        }
    }
}

std::vector<Shape> shapesFromJson(const Json& j, const char* key, const Problem& p, const std::string& where)
{
    std::vector<Shape> out;
    if (const Json* ss = optionalArray(j, key, where)) {
        int i = 0;
        for (const auto& s : *ss) {
            const std::string w = where + "." + key + "[" + std::to_string(i++) + "]";
            Shape sh = p.withConstants(shapeFromJson(s, w));
            std::string why;
            if (!p.shapeIsValid(sh, &why))
                throw InputError(w + ": " + why);
            out.push_back(std::move(sh));
        }
    }
    return out;
}

Problem problemFromJson(const Json& j, const std::string& where)
{
    Problem p;
    p.name = string(j, "name", where);
    if (!isSafeId(p.name))
        throw InputError(where + ".name: '" + abbreviate(p.name) + "' must be letters, digits, '_' or '-'");
    p.description = stringOr(j, "description", "", where);
    if (const Json* tags = optionalArray(j, "tags", where))
        for (const auto& t : *tags) {
            if (!t.is_string())
                throw InputError(where + ".tags: expected strings");
            p.tags.push_back(t.get<std::string>());
        }
    dimSpaceFromJson(j, where, p);
    if (const Json* ss = optionalArray(j, "scalars", where)) {
        int i = 0;
        for (const auto& s : *ss) {
            const std::string w = where + ".scalars[" + std::to_string(i++) + "]";
            ScalarSpec sc;
            sc.name = string(s, "name", w);
            if (const auto bad = badProblemName(p, sc.name, "scalar"))
                throw InputError(w + ".name: " + *bad);
            const auto dt = dtypeFromName(stringOr(s, "dtype", "f32", w));
            if (!dt || (*dt != DType::F32 && *dt != DType::I32))
                throw InputError(w + ".dtype: scalars are f32 or i32");
            sc.dtype = *dt;
            if (s.contains("value") && s.at("value").is_string())
                sc.formula = exprField(s, "value", w);
            else
                sc.value = number(s, "value", w);
            p.scalars.push_back(sc);
        }
    }
    {
        int i = 0;
        for (const auto& t : arrayField(j, "tensors", where)) {
            const std::string w = where + ".tensors[" + std::to_string(i++) + "]";
            TensorSpec ts;
            ts.name = string(t, "name", w);
            if (const auto bad = badProblemName(p, ts.name, "tensor"))
                throw InputError(w + ".name: " + *bad);
            const std::string dt = string(t, "dtype", w);
            const auto d = dtypeFromName(dt);
            if (!d)
                throw InputError(w + ".dtype: unknown dtype '" + abbreviate(dt) + "'");
            ts.dtype = *d;
            int k = 0;
            for (const auto& e : arrayField(t, "shape", w)) {
                const std::string wk = w + ".shape[" + std::to_string(k++) + "]";
                if (!e.is_string() && !e.is_number_integer())
                    throw InputError(wk + ": expected an expression string or an integer");
                try {
                    ts.shape.push_back(Expr::parse(e.is_string() ? e.get<std::string>() : e.dump()));
                } catch (const ExprError& err) {
                    throw InputError(wk + ": " + err.what());
                }
            }
            const std::string role = string(t, "role", w);
            const auto r = tensorRoleFromName(role);
            if (!r)
                throw InputError(w + ".role: unknown role '" + abbreviate(role)
                    + "' (input, output, or inout for a tensor the kernel updates in place)");
            ts.role = *r;
            ts.scale = numberOr(t, "scale", 1.0, w);
            ts.largeScale = numberOr(t, "large_scale", 0.0, w);
            if (!(ts.largeScale >= 0))
                throw InputError(w + ".large_scale: must be a magnitude above 0 (absent: 1000 x scale)");
            if (const Json* v = optionalObject(t, "values", w)) {
                const std::string wv = w + ".values";
                const std::string kind = string(*v, "kind", wv);
                const auto valueKind = intValuesKindFromName(kind);
                if (!valueKind)
                    throw InputError(wv + ".kind: unknown kind '" + abbreviate(kind)
                        + "' (any, range, distinct, permutation, lengths)");
                ts.values.kind = *valueKind;
                const bool needsHigh = *valueKind == IntValues::Kind::Range || *valueKind == IntValues::Kind::Distinct
                    || *valueKind == IntValues::Kind::Lengths;
                ts.values.low = exprField(*v, "low", wv, "0");
                if (needsHigh)
                    ts.values.high = exprField(*v, "high", wv);
                ts.values.padFraction = numberOr(*v, "pad_fraction", 0.0, wv);
            }
            p.tensors.push_back(std::move(ts));
        }
    }
    bool hasOutput = false;
    for (const auto& t : p.tensors)
        hasOutput |= writesOutput(t.role);
    if (!hasOutput)
        throw InputError(where + ".tensors: at least one output (or inout tensor) is required");
    p.tuningShapes = shapesFromJson(j, "tuning_shapes", p, where);
    p.verifyShapes = shapesFromJson(j, "verify_shapes", p, where);
    p.tuningShapesFrom = stringOr(j, "tuning_shapes_from", "", where);
    if (p.tuningShapes.empty())
        throw InputError(where + ".tuning_shapes: at least one shape is required");
    if (const Json* tol = optionalObject(j, "tolerances", where))
        for (const auto& [k, v] : tol->items()) {
            const auto d = dtypeFromName(k);
            if (!d)
                throw InputError(where + ".tolerances: unknown dtype '" + abbreviate(k) + "'");
            p.tolerances[*d]
                = { number(v, "rel_l2", where + ".tolerances." + k), number(v, "max_abs", where + ".tolerances." + k) };
        }
    p.flops = exprField(j, "flops", where, "0");
    p.bytes = exprField(j, "bytes", where, "0");
    p.referenceFile = stringOr(j, "reference", p.referenceFile, where);
    p.baselineFile = stringOr(j, "baseline", p.baselineFile, where);
    p.templateFile = stringOr(j, "template", p.templateFile, where);
    p.tritonTemplateFile = stringOr(j, "triton_template", "", where);
    for (const auto* f : { &p.referenceFile, &p.baselineFile, &p.templateFile, &p.tritonTemplateFile })
        if (f->find('/') != std::string::npos || f->find("..") != std::string::npos)
            throw InputError(
                where + ": source file names must be plain names in the problem folder, got '" + abbreviate(*f) + "'");
    p.libraryBaseline = stringOr(j, "library_baseline", "", where);
    if (j.contains("min_arch")) {
        const std::string a = string(j, "min_arch", where);
        const auto n = archNumber(a);
        if (!n)
            throw InputError(where + ".min_arch: '" + a + "' is not an architecture like \"sm_80\"");
        p.minArch = *n;
    }
    if (const Json* t = optionalObject(j, "arch_templates", where))
        for (const auto& [arch, file] : t->items()) {
            const auto n = archNumber(arch);
            if (!n)
                throw InputError(
                    where + ".arch_templates: '" + abbreviate(arch) + "' is not an architecture like \"sm_90a\"");
            if (!file.is_string() || file.get<std::string>().empty()
                || file.get<std::string>().find('/') != std::string::npos
                || file.get<std::string>().find("..") != std::string::npos)
                throw InputError(where + ".arch_templates." + arch + ": a plain file name in the problem folder");
            p.archTemplates[*n] = file.get<std::string>();
        }
    if (const Json* rules = optionalArray(j, "trace_match", where)) {
        int i = 0;
        for (const auto& r : *rules) {
            const std::string w = where + ".trace_match[" + std::to_string(i++) + "]";
            if (!r.is_object())
                throw InputError(w + ": expected an object");
            TraceMatchRule rule;
            rule.module = stringOr(r, "module", "", w);
            rule.op = stringOr(r, "op", "", w);
            rule.shapeOp = stringOr(r, "shape_op", "", w);
            rule.then = stringOr(r, "then", "", w);
            if (const Json* types = optionalArray(r, "dtypes", w))
                for (const auto& t : *types) {
                    if (!t.is_string())
                        throw InputError(w + ".dtypes: expected strings such as \"c10::BFloat16\"");
                    rule.dtypes.push_back(t.get<std::string>());
                }
            if (r.contains("when"))
                rule.when = exprField(r, "when", w);
            if (const Json* dims = optionalObject(r, "dims", w))
                for (const auto& [dim, e] : dims->items())
                    rule.dims.emplace(dim, exprField(*dims, dim.c_str(), w + ".dims"));
            p.traceMatch.push_back(std::move(rule));
        }
    }
    if (const Json* regimes = optionalArray(j, "regimes", where)) {
        int i = 0;
        for (const auto& r : *regimes) {
            const std::string w = where + ".regimes[" + std::to_string(i++) + "]";
            if (!r.is_object())
                throw InputError(w + ": expected an object like {\"name\": \"decode\", \"when\": \"T <= 256\"}");
            p.regimes.push_back({ string(r, "name", w), exprField(r, "when", w) });
        }
    }
    validateProblem(p, where);
    return p;
}

Json toJson(const Problem& p)
{
    Json dims = Json::array(), constants = Json::object();
    for (const auto& d : p.dims)
        if (d.constant)
            constants[d.name] = d.min;
        else
            dims.push_back({ { "name", d.name }, { "min", d.min }, { "max", d.max }, { "multiple_of", d.multipleOf },
                { "log_uniform", d.logUniform } });
    Json cons = Json::array();
    for (const auto& c : p.dimConstraints)
        cons.push_back(c.text());
    Json scalars = Json::array();
    for (const auto& s : p.scalars)
        scalars.push_back({ { "name", s.name }, { "dtype", dtypeName(s.dtype) },
            { "value", s.formula ? Json(s.formula->text()) : Json(s.value) } });
    Json tensors = Json::array();
    for (const auto& t : p.tensors) {
        Json shape = Json::array();
        for (const auto& e : t.shape)
            shape.push_back(e.text());
        Json tj = { { "name", t.name }, { "dtype", dtypeName(t.dtype) }, { "shape", shape },
            { "role", tensorRoleName(t.role) }, { "scale", t.scale } };
        if (t.largeScale > 0)
            tj["large_scale"] = t.largeScale;
        if (t.values.kind != IntValues::Kind::Any)
            tj["values"] = { { "kind", intValuesKindName(t.values.kind) }, { "low", t.values.low.text() },
                { "high", t.values.high.text() }, { "pad_fraction", t.values.padFraction } };
        tensors.push_back(std::move(tj));
    }
    Json tuning = Json::array(), verify = Json::array();
    for (const auto& s : p.tuningShapes)
        tuning.push_back(toJson(s));
    for (const auto& s : p.verifyShapes)
        verify.push_back(toJson(s));
    Json tol = Json::object();
    for (const auto& [d, t] : p.tolerances)
        tol[dtypeName(d)] = { { "rel_l2", t.relL2 }, { "max_abs", t.maxAbs } };
    Json tags = p.tags;
    Json j = { { "name", p.name }, { "description", p.description }, { "tags", tags }, { "dims", dims },
        { "dim_constraints", cons }, { "scalars", scalars }, { "tensors", tensors }, { "tuning_shapes", tuning },
        { "verify_shapes", verify }, { "tolerances", tol }, { "flops", p.flops.text() }, { "bytes", p.bytes.text() },
        { "reference", p.referenceFile }, { "baseline", p.baselineFile }, { "template", p.templateFile },
        { "library_baseline", p.libraryBaseline } };
    if (!constants.empty())
        j["constants"] = constants;
    if (p.minArch > 0)
        j["min_arch"] = archName(p.minArch);
    for (const auto& [arch, file] : p.archTemplates)
        j["arch_templates"][archName(arch)] = file;
    for (const auto& rule : p.traceMatch) {
        Json r = Json::object();
        if (!rule.module.empty())
            r["module"] = rule.module;
        if (!rule.op.empty())
            r["op"] = rule.op;
        if (!rule.shapeOp.empty())
            r["shape_op"] = rule.shapeOp;
        if (!rule.then.empty())
            r["then"] = rule.then;
        if (!rule.dtypes.empty())
            r["dtypes"] = rule.dtypes;
        if (rule.when)
            r["when"] = rule.when->text();
        for (const auto& [dim, e] : rule.dims)
            r["dims"][dim] = e.text();
        j["trace_match"].push_back(std::move(r));
    }
    for (const Regime& r : p.regimes)
        j["regimes"].push_back({ { "name", r.name }, { "when", r.condition.text() } });
    if (!p.tritonTemplateFile.empty())
        j["triton_template"] = p.tritonTemplateFile;
    return j;
}

Problem loadProblem(const std::string& folder)
{
    const std::filesystem::path file = std::filesystem::path(folder) / "problem.json";
    Problem p = problemFromJson(readJsonFile(file), file.string());
    p.folder = folder;
    return p;
}

} // namespace kl
