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
// and workspaces pass as device pointers, dims as int, scalars by their declared type.
#include "core/expr.h"
#include "core/problem.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kl {

using ParamValues = std::map<std::string, std::int64_t>;

// Built-in identifier: the device's compute capability x10 (75, 86, 90). Constraints name it to gate parameter
// values on the architecture ("@kl:constraint CLUSTER == 1 || ARCH >= 90"); the device limits bind it
// (core/loop_device_limits), so no parameter may take the name.
inline constexpr const char* kArchIdentifier = "ARCH";

struct ParamSpec {
    std::string name;
    std::int64_t defaultValue = 0;
    std::vector<std::int64_t> values;
    int line = 0;
};

struct LaunchStep {
    std::string kernel;
    Expr grid[3];
    Expr block[3];
    Expr sharedBytes;
    std::vector<std::string> args;
    int line = 0;
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
    std::vector<ParamSpec> params;
    std::vector<ConstraintSpec> constraints;
    std::vector<WorkspaceSpec> workspaces;
    std::vector<LaunchStep> launches;

    const ParamSpec* param(const std::string& name) const;
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

// The same source with its parameters fixed: "#define NAME VALUE" lines after the annotations.
std::string bakeParameters(const std::string& source, const ParamValues& params);

Bindings bindingsFor(const ParamValues& params, const Bindings& dims);

} // namespace kl
