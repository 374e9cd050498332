#pragma once
// Launch plans of the worker: a loaded CUBIN with its @kl launch plan (geometry, arguments, tensor maps resolved
// per shape), and cuBLAS's bf16 GEMM as a library baseline.
#include "kernels/worker/engine.h"

namespace kl::worker {

// Takes ownership of `module` (unloaded with the plan, also when the constructor throws).
std::shared_ptr<Plan> makeKernelPlan(CUmodule module, KernelSpec spec, ParamValues params,
    const std::map<std::string, std::string>& lowered, const DeviceInfo& device, std::string label,
    std::map<std::string, KernelAbi> abi = {});
#ifdef KL_WORKER_HAVE_CUBLAS
std::shared_ptr<Plan> makeCublasGemmPlan(void* cublasHandle);
#endif
// Records in the launch ledger the kernels one replay of a graph captured from `kernelPlan` (a makeKernelPlan
// binding) runs: graph replays do not pass through BoundPlan::run.
void noteGraphReplay(const BoundPlan& kernelPlan);

} // namespace kl::worker
