#include "core/device.h"

#include <algorithm>

namespace kl {

std::optional<int> archNumber(const std::string& arch)
{
    std::string a = arch;
    if (a.rfind("sm_", 0) == 0)
        a = a.substr(3);
    else if (a.rfind("compute_", 0) == 0)
        a = a.substr(8);
    else
        return std::nullopt;
    if (!a.empty() && (a.back() == 'a' || a.back() == 'f'))
        a.pop_back();
    if (a.size() < 2 || a.size() > 3 || !std::all_of(a.begin(), a.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    return std::stoi(a);
}

int archNumber(const DeviceInfo& d)
{
    if (d.ccMajor > 0)
        return d.ccMajor * 10 + d.ccMinor;
    return archNumber(d.arch).value_or(0);
}

std::string archName(int arch)
{
    return "sm_" + std::to_string(arch);
}

std::string throttleText(std::uint64_t reasons)
{
    std::string out;
    for (const ThrottleReason& r : kThrottleReasons)
        if (reasons & r.bit)
            out += (out.empty() ? "" : ",") + std::string(r.name);
    return out;
}

bool DeviceSample::slowedBeyondPowerCap() const
{
    for (const ThrottleReason& r : kThrottleReasons)
        if (r.bit != kPowerCapReason.bit && (throttleReasons & r.bit))
            return true;
    return false;
}

} // namespace kl
