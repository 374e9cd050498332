#pragma once

namespace kl::test {

// True when a CUDA driver and at least one device exist; GPU tests skip themselves otherwise.
bool cudaDeviceAvailable();

} // namespace kl::test

// First statement of a GPU test: skips it on a machine without a device.
#define REQUIRE_GPU()                                                                                                  \
    if (!kl::test::cudaDeviceAvailable())                                                                              \
    GTEST_SKIP() << "no CUDA device"
