#include "core/loop_measurement_cache.h"

#include "core/loop_device_limits.h"
#include "core/session_store.h"

#include <nlohmann/json.hpp>

namespace kl {

namespace {

    nlohmann::json shapesJson(const std::vector<Shape>& shapes)
    {
        nlohmann::json a = nlohmann::json::array();
        for (const Shape& s : shapes) {
            nlohmann::json dims = nlohmann::json::object();
            for (const auto& [k, v] : s.dims)
                dims[k] = v;
            a.push_back(dims);
        }
        return a;
    }

} // namespace

std::string MeasurementKey::canonical() const
{
    nlohmann::json j;
    j["problem"] = problem;
    j["source"] = sourceHash;
    j["params"] = nlohmann::json::object();
    for (const auto& [k, v] : params)
        j["params"][k] = v;
    j["shapes"] = shapesJson(shapes);
    j["device"] = device;
    j["driver"] = driver;
    j["cuda"] = cuda;
    if (!protocol.empty())
        j["protocol"] = protocol; // absent by default, so default-protocol digests never change
    return j.dump(); // nlohmann orders object keys, so the text is stable
}

std::string MeasurementKey::digest() const
{
    return sha256Hex(canonical());
}

std::string MeasurementKey::shapesDigest() const
{
    nlohmann::json j;
    j["problem"] = problem;
    j["source"] = sourceHash;
    j["shapes"] = shapesJson(shapes);
    j["device"] = device;
    j["driver"] = driver;
    j["cuda"] = cuda;
    if (!protocol.empty())
        j["protocol"] = protocol;
    return sha256Hex(j.dump());
}

MeasurementKey measurementKeyFor(const Candidate& c, const Problem& p, const DeviceInfo& d, const std::string& protocol)
{
    MeasurementKey k;
    k.problem = p.name;
    k.sourceHash = c.sourceHash.empty() ? sha256Hex(c.source) : c.sourceHash;
    k.params = c.params;
    k.shapes = shapesOf(p);
    k.device = d.name + " " + d.arch;
    k.driver = d.driverVersion;
    k.cuda = d.cudaDriverApi + "/" + d.cudaRuntime + "/nvrtc " + d.nvrtcVersion;
    // A screen is another measurement than the full protocol: neither may stand in for the other.
    k.protocol = c.fidelity.screen() ? (protocol.empty() ? "" : protocol + " ") + c.fidelity.label() : protocol;
    return k;
}

} // namespace kl
