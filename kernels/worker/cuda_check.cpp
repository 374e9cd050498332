#include "kernels/worker/cuda_check.h"

namespace kl::worker {

bool CudaError::sticky() const
{
    switch (m_code) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_UNKNOWN:
        return true;
    default:
        return false;
    }
}

std::string cuErrorText(CUresult r)
{
    const char* name = nullptr;
    const char* text = nullptr;
    cuGetErrorName(r, &name);
    cuGetErrorString(r, &text);
    return std::string(name ? name : "CUDA_ERROR_?") + ": " + (text ? text : "unknown");
}

void cuCheck(CUresult r, const char* call, const char* file, int line)
{
    if (r == CUDA_SUCCESS)
        return;
    throw CudaError(r, cuErrorText(r) + " in " + call + " (" + file + ":" + std::to_string(line) + ")");
}

} // namespace kl::worker
