#pragma once
// NVML through dlopen: clocks, temperature, power and throttle reasons with every measurement. The worker
// runs without it (available = false) when the library is missing.
#include "core/device.h"

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace kl::worker {

class NvmlMonitor {
public:
    NvmlMonitor() = default;
    ~NvmlMonitor();
    NvmlMonitor(const NvmlMonitor&) = delete;
    NvmlMonitor& operator=(const NvmlMonitor&) = delete;

    bool open(const std::string& pciBusId); // false when NVML or the device is missing
    bool available() const { return m_device != nullptr; }
    DeviceSample sample() const; // queries NVML now (slow: milliseconds)

    // A background thread samples every periodMs so a measurement reads the state without waiting on NVML.
    void startSampler(int periodMs);
    DeviceSample latest() const;
    void beginWindow(); // starts collecting throttle reasons, the lowest SM clock and the highest temperature
    DeviceSample window() const; // the latest sample with the reasons OR'ed and the extremes since beginWindow()
    std::string driverVersion() const;
    int maxSmClockMHz() const;
    int maxMemClockMHz() const;

private:
    void samplerLoop(int periodMs);
    mutable std::mutex m_mutex;
    std::condition_variable m_cv;
    std::thread m_sampler;
    bool m_stop = false;
    DeviceSample m_latest;
    DeviceSample m_window;
    void* m_lib = nullptr;
    void* m_device = nullptr;
    void* m_fns[8] = {};
};

} // namespace kl::worker
