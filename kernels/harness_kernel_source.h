#pragma once
#include <string>
#include <vector>

namespace kl {
// NVRTC source of the worker's helper kernels (fill, poison, compare, sum of squares, hash, canaries, copy, spin).
const std::string& harnessKernelSource();
// Every kernel of that source, as the worker loads them.
const std::vector<std::string>& harnessKernelNames();
} // namespace kl
