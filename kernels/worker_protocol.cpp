#include "kernels/worker_protocol.h"

#include "core/json_io.h"

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

// The wire carries the same JSON forms as the session store (core/json_io), so nothing is lost between the
// worker and the session.
Json toJson(const DeviceInfo& d) { return kl::toJson(d); }
DeviceInfo deviceInfo(const Json& j) { return kl::deviceFromJson(j, "device"); }
Json toJson(const DeviceSample& d) { return kl::toJson(d); }
DeviceSample deviceSample(const Json& j) { return kl::deviceSampleFromJson(j, "sample"); }
Json toJson(const TimingStats& t) { return kl::toJson(t); }
TimingStats timingStats(const Json& j) { return kl::timingFromJson(j, "timing"); }
Json toJson(const CorrectnessStats& c) { return kl::toJson(c); }
CorrectnessStats correctnessStats(const Json& j) { return kl::correctnessFromJson(j, "check"); }
Json toJson(const VerdictReason& r) { return kl::toJson(r); }
VerdictReason verdictReason(const Json& j) { return kl::reasonFromJson(j, "reason"); }
Json toJson(const Shape& s) { return kl::toJson(s); }
Shape shape(const Json& j) { return kl::shapeFromJson(j, "shape"); }
Json toJson(const ShapeResult& s) { return kl::toJson(s); }
ShapeResult shapeResult(const Json& j) { return kl::shapeResultFromJson(j, "shape_result"); }
Json toJson(const CompileReport& c) { return kl::toJson(c); }
CompileReport compileReport(const Json& j) { return kl::compileReportFromJson(j, "compile"); }

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
