#pragma once
#include <string>

namespace kl {
// NVRTC source of the worker's helper kernels (fill, poison, compare, max error, hash, canaries, copy, spin).
const std::string& harnessKernelSource();
} // namespace kl
