#include "kernels/worker_protocol.h"

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
        const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                           static_cast<unsigned char>(in[i + 2]);
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

Json toJson(const DeviceInfo& d)
{
    return {{"name", d.name},
            {"cc_major", d.ccMajor},
            {"cc_minor", d.ccMinor},
            {"arch", d.arch},
            {"sm_count", d.smCount},
            {"l2_bytes", d.l2Bytes},
            {"shared_per_block", d.sharedPerBlock},
            {"shared_per_block_optin", d.sharedPerBlockOptin},
            {"shared_per_sm", d.sharedPerSm},
            {"regs_per_block", d.regsPerBlock},
            {"regs_per_sm", d.regsPerSm},
            {"max_threads_per_block", d.maxThreadsPerBlock},
            {"max_threads_per_sm", d.maxThreadsPerSm},
            {"warp_size", d.warpSize},
            {"global_mem_bytes", d.globalMemBytes},
            {"sm_clock_mhz", d.smClockMHz},
            {"mem_clock_mhz", d.memClockMHz},
            {"mem_bus_width_bits", d.memBusWidthBits},
            {"driver_version", d.driverVersion},
            {"cuda_driver_api", d.cudaDriverApi},
            {"cuda_runtime", d.cudaRuntime},
            {"nvrtc_version", d.nvrtcVersion},
            {"uuid", d.uuid},
            {"measured_copy_bandwidth", d.measuredCopyBandwidth}};
}

DeviceInfo deviceInfo(const Json& j)
{
    DeviceInfo d;
    d.name = j.value("name", "");
    d.ccMajor = j.value("cc_major", 0);
    d.ccMinor = j.value("cc_minor", 0);
    d.arch = j.value("arch", "");
    d.smCount = j.value("sm_count", 0);
    d.l2Bytes = j.value("l2_bytes", std::int64_t{0});
    d.sharedPerBlock = j.value("shared_per_block", std::int64_t{0});
    d.sharedPerBlockOptin = j.value("shared_per_block_optin", std::int64_t{0});
    d.sharedPerSm = j.value("shared_per_sm", std::int64_t{0});
    d.regsPerBlock = j.value("regs_per_block", 0);
    d.regsPerSm = j.value("regs_per_sm", 0);
    d.maxThreadsPerBlock = j.value("max_threads_per_block", 0);
    d.maxThreadsPerSm = j.value("max_threads_per_sm", 0);
    d.warpSize = j.value("warp_size", 32);
    d.globalMemBytes = j.value("global_mem_bytes", std::int64_t{0});
    d.smClockMHz = j.value("sm_clock_mhz", 0);
    d.memClockMHz = j.value("mem_clock_mhz", 0);
    d.memBusWidthBits = j.value("mem_bus_width_bits", 0);
    d.driverVersion = j.value("driver_version", "");
    d.cudaDriverApi = j.value("cuda_driver_api", "");
    d.cudaRuntime = j.value("cuda_runtime", "");
    d.nvrtcVersion = j.value("nvrtc_version", "");
    d.uuid = j.value("uuid", "");
    d.measuredCopyBandwidth = j.value("measured_copy_bandwidth", 0.0);
    return d;
}

Json toJson(const DeviceSample& d)
{
    return {{"sm_clock_mhz", d.smClockMHz},     {"mem_clock_mhz", d.memClockMHz}, {"temperature_c", d.temperatureC},
            {"power_w", d.powerW},              {"throttle_reasons", d.throttleReasons},
            {"throttle_text", d.throttleText}, {"available", d.available}};
}

DeviceSample deviceSample(const Json& j)
{
    DeviceSample d;
    d.smClockMHz = j.value("sm_clock_mhz", 0);
    d.memClockMHz = j.value("mem_clock_mhz", 0);
    d.temperatureC = j.value("temperature_c", 0);
    d.powerW = j.value("power_w", 0.0);
    d.throttleReasons = j.value("throttle_reasons", std::uint64_t{0});
    d.throttleText = j.value("throttle_text", "");
    d.available = j.value("available", false);
    return d;
}

Json toJson(const TimingStats& t)
{
    return {{"median_us", t.medianUs}, {"p10_us", t.p10Us},     {"p90_us", t.p90Us},
            {"ci_low_us", t.ciLowUs},  {"ci_high_us", t.ciHighUs}, {"samples", t.samples},
            {"graph_mode", t.graphMode}, {"launches_per_sample", t.launchesPerSample}};
}

TimingStats timingStats(const Json& j)
{
    TimingStats t;
    t.medianUs = j.value("median_us", 0.0);
    t.p10Us = j.value("p10_us", 0.0);
    t.p90Us = j.value("p90_us", 0.0);
    t.ciLowUs = j.value("ci_low_us", 0.0);
    t.ciHighUs = j.value("ci_high_us", 0.0);
    t.samples = j.value("samples", 0);
    t.graphMode = j.value("graph_mode", false);
    t.launchesPerSample = j.value("launches_per_sample", 1);
    return t;
}

Json toJson(const CorrectnessStats& c)
{
    return {{"rel_l2", c.relL2},
            {"max_abs", c.maxAbs},
            {"non_finite", c.nonFinite},
            {"full_coverage", c.fullCoverage},
            {"canaries_intact", c.canariesIntact},
            {"inputs_unchanged", c.inputsUnchanged},
            {"seed", c.seed},
            {"distribution", c.distribution},
            {"passed", c.passed}};
}

CorrectnessStats correctnessStats(const Json& j)
{
    CorrectnessStats c;
    c.relL2 = j.value("rel_l2", 0.0);
    c.maxAbs = j.value("max_abs", 0.0);
    c.nonFinite = j.value("non_finite", false);
    c.fullCoverage = j.value("full_coverage", true);
    c.canariesIntact = j.value("canaries_intact", true);
    c.inputsUnchanged = j.value("inputs_unchanged", true);
    c.seed = j.value("seed", std::uint64_t{0});
    c.distribution = j.value("distribution", "");
    c.passed = j.value("passed", false);
    return c;
}

Json toJson(const VerdictReason& r)
{
    return {{"rule", r.rule}, {"message", r.message}, {"line", r.line}, {"blocking", r.blocking}};
}

VerdictReason verdictReason(const Json& j)
{
    VerdictReason r;
    r.rule = j.value("rule", "");
    r.message = j.value("message", "");
    r.line = j.value("line", 0);
    r.blocking = j.value("blocking", true);
    return r;
}

Json toJson(const Shape& s)
{
    return {{"dims", s.dims}, {"weight", s.weight}};
}

Shape shape(const Json& j)
{
    Shape s;
    if (j.contains("dims"))
        s.dims = j.at("dims").get<std::map<std::string, std::int64_t>>();
    s.weight = j.value("weight", 1.0);
    return s;
}

Json toJson(const ShapeResult& s)
{
    Json j = {{"shape", toJson(s.shape)}, {"held_out", s.heldOut}, {"correct", s.correct}, {"speedup", s.speedup},
              {"speedup_ci_low", s.speedupCiLow}, {"speedup_ci_high", s.speedupCiHigh}};
    auto& checks = j["checks"] = Json::array();
    for (const auto& c : s.checks)
        checks.push_back(toJson(c));
    if (s.timing)
        j["timing"] = toJson(*s.timing);
    if (s.baselineTiming)
        j["baseline_timing"] = toJson(*s.baselineTiming);
    if (s.graphTiming)
        j["graph_timing"] = toJson(*s.graphTiming);
    return j;
}

ShapeResult shapeResult(const Json& j)
{
    ShapeResult s;
    s.shape = shape(j.at("shape"));
    s.heldOut = j.value("held_out", false);
    s.correct = j.value("correct", false);
    s.speedup = j.value("speedup", 0.0);
    s.speedupCiLow = j.value("speedup_ci_low", 0.0);
    s.speedupCiHigh = j.value("speedup_ci_high", 0.0);
    if (j.contains("checks"))
        for (const auto& c : j.at("checks"))
            s.checks.push_back(correctnessStats(c));
    if (j.contains("timing"))
        s.timing = timingStats(j.at("timing"));
    if (j.contains("baseline_timing"))
        s.baselineTiming = timingStats(j.at("baseline_timing"));
    if (j.contains("graph_timing"))
        s.graphTiming = timingStats(j.at("graph_timing"));
    return s;
}

Json toJson(const CompileReport& c)
{
    Json j = {{"ok", c.ok}, {"log", c.log}, {"compile_ms", c.compileMs}, {"cache_hit", c.cacheHit}};
    auto& ks = j["kernels"] = Json::array();
    for (const auto& k : c.kernels)
        ks.push_back({{"kernel", k.kernel},
                      {"registers", k.registers},
                      {"spill_stores", k.spillStores},
                      {"spill_loads", k.spillLoads},
                      {"static_shared", k.staticSharedBytes},
                      {"local", k.localBytes},
                      {"max_threads", k.maxThreadsPerBlock}});
    return j;
}

CompileReport compileReport(const Json& j)
{
    CompileReport c;
    c.ok = j.value("ok", false);
    c.log = j.value("log", "");
    c.compileMs = j.value("compile_ms", 0.0);
    c.cacheHit = j.value("cache_hit", false);
    if (j.contains("kernels"))
        for (const auto& k : j.at("kernels")) {
            CompileReport::KernelResources r;
            r.kernel = k.value("kernel", "");
            r.registers = k.value("registers", 0);
            r.spillStores = k.value("spill_stores", 0);
            r.spillLoads = k.value("spill_loads", 0);
            r.staticSharedBytes = k.value("static_shared", 0);
            r.localBytes = k.value("local", 0);
            r.maxThreadsPerBlock = k.value("max_threads", 0);
            c.kernels.push_back(r);
        }
    return c;
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

} // namespace kl::wire
