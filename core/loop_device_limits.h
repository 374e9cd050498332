#pragma once
// Whether a configuration can run on the device at all: parameter values its architecture lacks, threads per
// block, block and grid dimensions, shared memory per block and (after compilation) registers. Checked before a
// configuration is timed, so the tuner never spends GPU time on a launch that would fail.
#include "core/device.h"
#include "core/evaluation.h"
#include "core/kernel_spec.h"
#include "core/problem.h"

#include <optional>
#include <vector>

namespace kl {

// nullopt when every launch step fits on every shape; otherwise the first violation as a blocking reason
// with rule "device.arch" (a constraint naming ARCH fails on the device's architecture),
// "device.threads-per-block", "device.block-dims", "device.grid-dims", "device.shared-memory" or
// "device.registers". Expressions that cannot be evaluated here (names bound only at run time) are skipped:
// the harness still checks them. compile may be null (before compilation). A device that gives only its
// arch ("sm_86", as for a compile without a GPU) is checked for the rules that need nothing else.
std::optional<VerdictReason> checkDeviceLimits(const KernelSpec& spec, const ParamValues& params,
    const std::vector<Shape>& shapes, const DeviceInfo& device, const CompileReport* compile = nullptr);

// The shapes a configuration must run on: tuning shapes then verification shapes, without repeats.
std::vector<Shape> shapesOf(const Problem& p);

} // namespace kl
