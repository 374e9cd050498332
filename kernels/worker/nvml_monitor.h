#pragma once
// NVML through dlopen: clocks, temperature, power and throttle reasons with every measurement. The worker
// runs without it (available = false) when the library is missing.
#include "core/device.h"

#include <string>

namespace kl::worker {

class NvmlMonitor {
public:
    NvmlMonitor() = default;
    ~NvmlMonitor();
    NvmlMonitor(const NvmlMonitor&) = delete;
    NvmlMonitor& operator=(const NvmlMonitor&) = delete;

    bool open(const std::string& pciBusId); // false when NVML or the device is missing
    bool available() const { return m_device != nullptr; }
    DeviceSample sample() const;
    std::string driverVersion() const;
    int maxSmClockMHz() const;
    int maxMemClockMHz() const;

    // Reasons that lower clocks below what the workload asks for (idle and application settings excluded).
    static std::string throttleText(unsigned long long reasons);

private:
    void* m_lib = nullptr;
    void* m_device = nullptr;
    void* m_fns[8] = {};
};

} // namespace kl::worker
