#pragma once
#include <string>

namespace kl {
// NVRTC source of the worker's helper kernels (fill, poison, compare, sum of squares, hash, canaries, copy, spin).
const std::string& harnessKernelSource();
} // namespace kl
