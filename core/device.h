#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace kl {

// What the worker reports in its hello; recorded with every session and measurement.
struct DeviceInfo {
    std::string name;
    int ccMajor = 0;
    int ccMinor = 0;
    std::string arch; // NVRTC target, e.g. "sm_90a"
    int smCount = 0;
    std::int64_t l2Bytes = 0;
    std::int64_t sharedPerBlock = 0; // default limit
    std::int64_t sharedPerBlockOptin = 0; // after cudaFuncSetAttribute
    std::int64_t sharedPerSm = 0;
    int regsPerBlock = 0;
    int regsPerSm = 0;
    int maxThreadsPerBlock = 0;
    int maxThreadsPerSm = 0;
    int warpSize = 32;
    std::int64_t globalMemBytes = 0;
    int smClockMHz = 0; // max
    int memClockMHz = 0; // max
    int memBusWidthBits = 0;
    std::string driverVersion; // "580.159.04" when NVML has it, else the CUDA driver API number
    std::string cudaDriverApi; // e.g. "13.0"
    std::string cudaRuntime; // toolkit the worker was built with
    std::string nvrtcVersion;
    std::string uuid;
    double measuredCopyBandwidth = 0; // bytes/s, read+write, measured at worker start
    bool empty() const { return name.empty(); }
};

// Clocks and health at the moment of a measurement (NVML).
struct DeviceSample {
    int smClockMHz = 0;
    int memClockMHz = 0;
    int temperatureC = 0;
    double powerW = 0;
    std::uint64_t throttleReasons = 0; // NVML clocks event reasons bitmask
    std::string throttleText; // "" when not throttled, else the reasons in words
    bool available = false; // false when NVML is missing
    bool throttled() const { return !throttleText.empty(); }
    // The sustained power cap is a datacenter GPU's steady state under load (an H200 running tensor cores for
    // milliseconds reaches it), and candidate and baseline samples alternate under it alike, so their ratio holds.
    // Thermal and hardware slowdowns come and go within a measurement: they make its timings suspect.
    bool slowedBeyondPowerCap() const;
};

// NVML's clocks event reasons that lower clocks below what the workload asks for (idle and application clock
// settings excluded), with their names in throttleText.
struct ThrottleReason {
    std::uint64_t bit;
    const char* name;
};
inline constexpr ThrottleReason kPowerCapReason { 0x4, "sw-power-cap" };
inline constexpr ThrottleReason kThrottleReasons[] = { kPowerCapReason, { 0x8, "hw-slowdown" }, { 0x20, "sw-thermal" },
    { 0x40, "hw-thermal" }, { 0x80, "hw-power-brake" } };
std::string throttleText(std::uint64_t reasons);

// Architectures as compute capability x10: "sm_90a" -> 90, "sm_100" -> 100, "compute_86" -> 86; nullopt for
// anything else.
std::optional<int> archNumber(const std::string& arch);
// From ccMajor/ccMinor, else from arch; 0 when unknown.
int archNumber(const DeviceInfo& d);
// 86 -> "sm_86".
std::string archName(int arch);

} // namespace kl
