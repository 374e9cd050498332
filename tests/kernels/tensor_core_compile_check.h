#pragma once
// Shared by the kernel-template tests of test_kernels_archs: the sm_80-instruction attention kernels
// (decode_attention's templates, the MLA kernels on mma.sync and wgmma) and the memory-bound sm_90 templates.
#include "core/device.h"
#include "core/evaluation.h"
#include "core/kernel_spec.h"
#include "core/problem.h"
#include "kernels/nvrtc_compiler.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kl::test {

// A candidate file parsed against its problem as the harness reads it: the template tests' fixture state.
struct CandidateFile {
    void load(const std::filesystem::path& problemFolder, const std::filesystem::path& sourceFile);
    Problem problem;
    std::string source;
    KernelSpec spec;
};

// "" where the device limits admit a point, else the refusal as "rule: message".
std::string violation(const std::optional<VerdictReason>& why);

// A device of compute capability major.minor with the figures the device limits read (CUDA programming guide,
// compute capability tables): 48 KiB of shared memory per block without opting in, sharedOptinKiB with, 64K
// registers, 1024 threads per block.
DeviceInfo deviceModel(int major, int minor, std::int64_t sharedOptinKiB, int maxThreadsPerSm = 2048);

// Every shape the harness runs a candidate on: the tuning and verification shapes and 40 held-out ones.
std::vector<Shape> harnessShapes(const Problem& p);

// `source` compiled for each arch at each point (a point's missing parameters take their defaults), in a fresh
// cache; each module named "<arch> point <i>".
std::vector<std::pair<std::string, std::shared_ptr<const CompiledModule>>> compilePoints(const std::string& source,
    const KernelSpec& spec, const std::vector<ParamValues>& points, const std::vector<std::string>& archs);

// Each module compiled, has one kernel per launch line, spills nothing and passes the referee's PTX rules for
// `problem`.
void expectModulesWithoutSpills(
    const std::vector<std::pair<std::string, std::shared_ptr<const CompiledModule>>>& modules, const KernelSpec& spec,
    const Problem& problem);

// Compiles `source` for sm_80 and sm_90a at each point and checks each module as above; each also uses mma.sync,
// ldmatrix.trans and cp.async.
void expectTensorCoreModulesWithoutSpills(
    const std::string& source, const KernelSpec& spec, const Problem& problem, const std::vector<ParamValues>& points);

// The MLA decode kernels' split grid (mma.sync and wgmma alike): at every point, harness shape and SM count it is
// 1..min(64, tiles of the listed rows) splits, tileOf(point) rows a tile, within the workspace; the merge is launched
// only with more than one split, and a machine-sized batch (more row blocks than WAVES x SMs) gets one split.
void expectMlaSplitGridFitsTheWorkspace(
    const Problem& problem, const KernelSpec& spec, const std::function<std::int64_t(const ParamValues&)>& tileOf);

} // namespace kl::test
