#pragma once
// The candidate annotation format: device code plus comment lines that declare tunable parameters,
// constraints, the launch plan and workspaces. Candidates contain no host code; the harness allocates
// and launches. Example:
//
//   // @kl:param BLOCK = 256 in [64, 128, 256, 512, 1024]
//   // @kl:param VEC = 8 in [1, 2, 4, 8]
//   // @kl:constraint H % (VEC * 32) == 0
//   // @kl:workspace partial bytes=T*4 init=zero
//   // @kl:launch rmsnorm_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)
//
// Parameters reach the code as compile-time defines (-DBLOCK=256). Kernel arguments are named: tensors
// and workspaces pass as device pointers, dims as int, scalars by their declared type, tensor maps
// (@kl:tensormap, core/tensor_map.h) as a CUtensorMap by value. A launch line may add cluster=(X, Y, Z)
// (thread-block clusters, sm_90+; the grid a multiple of it) and pdl=1 (programmatic dependent launch: the
// kernel may start while the plan's previous kernel finishes, and waits with griddepcontrol.wait). A grid of 0 in
// some dimension means the launch is not made for that shape and those parameters.
#include "core/expr.h"
#include "core/problem.h"
#include "core/tensor_map.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kl {

using ParamValues = std::map<std::string, std::int64_t>;

// Built-in identifier: the device's compute capability x10 (75, 86, 90). Constraints name it to gate parameter
// values on the architecture ("@kl:constraint CLUSTER == 1 || ARCH >= 90"); the device limits bind it
// (core/loop_device_limits), so no parameter may take the name.
inline constexpr const char* kArchIdentifier = "ARCH";
// Built-in identifier for launch grids, clusters and shared memory: the device's multiprocessor count, for
// persistent kernels ("grid=(min(ceil_div(M, BM) * ceil_div(N, BN), SM_COUNT))"), splits sized to the machine (a
// cluster per split tile) and a block's share of an SM's shared memory when more blocks than SMs must run at once.
// Bound by the worker; 1 when the defaults are checked without a device.
inline constexpr const char* kSmCountIdentifier = "SM_COUNT";
// The most blocks a portable cluster holds (sm_90).
inline constexpr std::int64_t kMaxClusterBlocks = 8;

struct ParamSpec {
    std::string name;
    std::int64_t defaultValue = 0;
    std::vector<std::int64_t> values;
    int line = 0;
};

// A candidate is CUDA C++ (annotations in // comments) or a Triton @triton.jit kernel (annotations in # comments,
// parameters as tl.constexpr, a launch line with num_warps/num_stages instead of block/smem).
enum class KernelLanguage { Cuda, Triton };
const char* languageName(KernelLanguage l);
std::optional<KernelLanguage> languageFromName(const std::string& name);
// Triton when a line of the source starts with the @triton.jit decorator, else CUDA: one marker, no guessing.
KernelLanguage detectLanguage(const std::string& source);
// The language a file name declares: .py Triton, .cu/.cuh CUDA, else none.
std::optional<KernelLanguage> languageOfFileName(const std::string& path);
// The declared language must be the detected one; throws InputError naming where (a file) otherwise.
void requireLanguage(const std::string& source, KernelLanguage declared, const std::string& where);

// Makes p's template the one for language (problem.json "template" or "triton_template"); throws InputError
// naming the problem when it has none for that language.
void useTemplateFor(Problem& p, KernelLanguage language);

struct LaunchStep {
    std::string kernel;
    Expr grid[3];
    Expr block[3]; // Triton: (32 * num_warps, 1, 1)
    Expr sharedBytes; // Triton: 0 here; the compiler reports what the kernel needs
    Expr cluster[3]; // all 1 when the line names none
    bool hasCluster = false;
    bool programmaticLaunch = false; // pdl=1
    std::vector<std::string> args;
    Expr numWarps; // Triton only: over parameters, fixed at compile time
    Expr numStages;
    int line = 0;
};

// Why a grid cannot be launched in clusters of this shape; empty when it can.
std::string clusterProblem(const std::int64_t grid[3], const std::int64_t cluster[3]);

// What a compiler tells the launcher about one kernel beyond the launch plan (Triton: the dynamic shared memory it
// sized and the scratch pointers it appends to the parameter list, passed as null when it needs no scratch).
struct KernelAbi {
    int dynamicSharedBytes = 0;
    int trailingNullPointers = 0;
};

struct WorkspaceSpec {
    std::string name;
    Expr bytes;
    bool zeroInit = false; // otherwise poisoned before each launch
    int line = 0;
};

struct ConstraintSpec {
    Expr expr;
    int line = 0;
};

struct KernelSpec {
    KernelLanguage language = KernelLanguage::Cuda;
    std::vector<ParamSpec> params;
    std::vector<ConstraintSpec> constraints;
    std::vector<WorkspaceSpec> workspaces;
    std::vector<LaunchStep> launches;
    std::vector<TensorMapSpec> tensorMaps;

    const ParamSpec* param(const std::string& name) const;
    const TensorMapSpec* tensorMap(const std::string& name) const;
    ParamValues defaults() const;
    // Cartesian product of the declared values, filtered by the constraints that name only parameters.
    std::vector<ParamValues> enumerateSpace(std::size_t limit = 1'000'000) const;
    std::size_t spaceSize() const;
    // Constraints evaluated with params and (when given) shape dims; names unbound so far are skipped.
    bool satisfies(const ParamValues& p, const Bindings& dims, std::string* why = nullptr) const;
    // Values chosen from outside (--params, a tuning database): each names a declared parameter, is one of its
    // declared values, and the constraints hold. Throws InputError saying which value is wrong.
    void requireValidParams(const ParamValues& p, const Bindings& dims = {}) const;
};

// Parses the annotations; throws InputError naming the line on malformed ones.
KernelSpec parseKernelSpec(const std::string& source);

// The annotations of a candidate for problem: as above, and every name in a constraint, workspace or launch line
// is a parameter, dim (or, as a kernel argument, a tensor, workspace or scalar) of it, and each launch passes as
// many arguments as the kernel's parameter list in source declares (when the source spells it out).
KernelSpec parseKernelSpec(const std::string& source, const Problem& problem);

// The same source with its parameters fixed: "#define NAME VALUE" lines before the source (CUDA). Triton takes
// them as constexpr arguments at compile time, so its source only gains a comment line naming the values.
std::string bakeParameters(const std::string& source, const ParamValues& params);

Bindings bindingsFor(const ParamValues& params, const Bindings& dims);

} // namespace kl
