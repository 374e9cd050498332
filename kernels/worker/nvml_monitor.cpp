#include "kernels/worker/nvml_monitor.h"

#include <algorithm>
#include <chrono>
#include <dlfcn.h>

namespace kl::worker {

namespace {
    // The few NVML entry points we need, declared here: the CUDA 13 toolkit ships no NVML header, and the library comes
    // with the driver.
    using NvmlInit = int (*)();
    using NvmlShutdown = int (*)();
    using NvmlByPci = int (*)(const char*, void**);
    using NvmlClock = int (*)(void*, int, unsigned*);
    using NvmlTemp = int (*)(void*, int, unsigned*);
    using NvmlPower = int (*)(void*, unsigned*);
    using NvmlReasons = int (*)(void*, unsigned long long*);
    using NvmlDriver = int (*)(char*, unsigned);
    enum { kInit, kShutdown, kByPci, kClock, kMaxClock, kTemp, kPower, kReasons };
    constexpr int kClockSm = 1;
    constexpr int kClockMem = 2;
} // namespace

NvmlMonitor::~NvmlMonitor()
{
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_cv.notify_all();
    if (m_sampler.joinable())
        m_sampler.join();
    if (m_lib) {
        if (m_fns[kShutdown])
            reinterpret_cast<NvmlShutdown>(m_fns[kShutdown])();
        dlclose(m_lib);
    }
}

bool NvmlMonitor::open(const std::string& pciBusId)
{
    m_lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!m_lib)
        return false;
    const char* names[] = { "nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetCurrentClocksEventReasons" };
    for (int i = 0; i < 8; ++i)
        m_fns[i] = dlsym(m_lib, names[i]);
    if (!m_fns[kReasons])
        m_fns[kReasons] = dlsym(m_lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    if (!m_fns[kInit] || !m_fns[kByPci] || reinterpret_cast<NvmlInit>(m_fns[kInit])() != 0)
        return false;
    void* dev = nullptr;
    if (reinterpret_cast<NvmlByPci>(m_fns[kByPci])(pciBusId.c_str(), &dev) != 0)
        return false;
    m_device = dev;
    return true;
}

DeviceSample NvmlMonitor::sample() const
{
    DeviceSample s;
    if (!m_device)
        return s;
    s.available = true;
    unsigned v = 0;
    if (m_fns[kClock] && reinterpret_cast<NvmlClock>(m_fns[kClock])(m_device, kClockSm, &v) == 0)
        s.smClockMHz = static_cast<int>(v);
    if (m_fns[kClock] && reinterpret_cast<NvmlClock>(m_fns[kClock])(m_device, kClockMem, &v) == 0)
        s.memClockMHz = static_cast<int>(v);
    if (m_fns[kTemp] && reinterpret_cast<NvmlTemp>(m_fns[kTemp])(m_device, 0, &v) == 0)
        s.temperatureC = static_cast<int>(v);
    if (m_fns[kPower] && reinterpret_cast<NvmlPower>(m_fns[kPower])(m_device, &v) == 0)
        s.powerW = v / 1000.0;
    unsigned long long reasons = 0;
    if (m_fns[kReasons] && reinterpret_cast<NvmlReasons>(m_fns[kReasons])(m_device, &reasons) == 0) {
        s.throttleReasons = reasons;
        s.throttleText = kl::throttleText(reasons);
    }
    return s;
}

void NvmlMonitor::startSampler(int periodMs)
{
    if (!m_device || m_sampler.joinable())
        return;
    m_latest = sample();
    m_window = m_latest;
    m_sampler = std::thread([this, periodMs] { samplerLoop(periodMs); });
}

void NvmlMonitor::samplerLoop(int periodMs)
{
    std::unique_lock lock(m_mutex);
    while (!m_stop) {
        lock.unlock();
        const DeviceSample s = sample();
        lock.lock();
        m_latest = s;
        m_window.smClockMHz = m_window.smClockMHz ? std::min(m_window.smClockMHz, s.smClockMHz) : s.smClockMHz;
        m_window.memClockMHz = m_window.memClockMHz ? std::min(m_window.memClockMHz, s.memClockMHz) : s.memClockMHz;
        m_window.temperatureC = std::max(m_window.temperatureC, s.temperatureC);
        m_window.powerW = std::max(m_window.powerW, s.powerW);
        m_window.throttleReasons |= s.throttleReasons;
        m_cv.wait_for(lock, std::chrono::milliseconds(periodMs), [&] { return m_stop; });
    }
}

DeviceSample NvmlMonitor::latest() const
{
    if (!m_sampler.joinable())
        return sample();
    std::lock_guard lock(m_mutex);
    return m_latest;
}

void NvmlMonitor::beginWindow()
{
    std::lock_guard lock(m_mutex);
    m_window = m_latest;
}

DeviceSample NvmlMonitor::window() const
{
    if (!m_sampler.joinable())
        return sample();
    std::lock_guard lock(m_mutex);
    DeviceSample w = m_window;
    w.available = m_latest.available;
    w.throttleReasons |= m_latest.throttleReasons;
    w.throttleText = kl::throttleText(w.throttleReasons);
    return w;
}

std::string NvmlMonitor::driverVersion() const
{
    if (!m_lib)
        return {};
    auto fn = reinterpret_cast<NvmlDriver>(dlsym(m_lib, "nvmlSystemGetDriverVersion"));
    char buf[96] = {};
    if (fn && fn(buf, sizeof(buf)) == 0)
        return buf;
    return {};
}

int NvmlMonitor::maxSmClockMHz() const
{
    unsigned v = 0;
    if (m_device && m_fns[kMaxClock] && reinterpret_cast<NvmlClock>(m_fns[kMaxClock])(m_device, kClockSm, &v) == 0)
        return static_cast<int>(v);
    return 0;
}

int NvmlMonitor::maxMemClockMHz() const
{
    unsigned v = 0;
    if (m_device && m_fns[kMaxClock] && reinterpret_cast<NvmlClock>(m_fns[kMaxClock])(m_device, kClockMem, &v) == 0)
        return static_cast<int>(v);
    return 0;
}

} // namespace kl::worker
