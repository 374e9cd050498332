#pragma once
// Driver API error handling for the worker. A sticky error (illegal address, launch failure, trap) leaves
// the context unusable: the worker reports it as fatal and exits so the client restarts a clean one.
#include <cuda.h>
#include <stdexcept>
#include <string>

namespace kl::worker {

class CudaError : public std::runtime_error {
public:
    CudaError(CUresult code, const std::string& what)
        : std::runtime_error(what)
        , m_code(code)
    {
    }
    CUresult code() const { return m_code; }
    bool sticky() const;

private:
    CUresult m_code;
};

// A launch plan that cannot run on this device (too many threads, too much shared memory): the candidate's
// fault, reported as a verdict, never a crash.
class LaunchConfigError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

std::string cuErrorText(CUresult r);
void cuCheck(CUresult r, const char* call, const char* file, int line);

} // namespace kl::worker

#define KL_CU(call) ::kl::worker::cuCheck((call), #call, __FILE__, __LINE__)
