#pragma once
// Shared by the tests of the sm_80-instruction attention kernels (decode_attention's template, the MLA kernels).
#include "core/kernel_spec.h"
#include "core/problem.h"

#include <string>
#include <vector>

namespace kl::test {

// Compiles `source` for sm_80 and sm_90a at each point (a point's missing parameters take their defaults) and
// checks each module: it uses mma.sync, ldmatrix.trans and cp.async, has two kernels, spills nothing and passes
// the referee's PTX rules for `problem`.
void expectTensorCoreModulesWithoutSpills(
    const std::string& source, const KernelSpec& spec, const Problem& problem, const std::vector<ParamValues>& points);

} // namespace kl::test
