#include "tests/support/gpu_available.h"

#include <dlfcn.h>

namespace kl::test {

// dlopen keeps libcuda.so.1 out of the test binary's dependencies, so the binary also starts on CI machines
// without a driver.
bool cudaDeviceAvailable()
{
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return false;
    auto init = reinterpret_cast<int (*)(unsigned)>(dlsym(lib, "cuInit"));
    auto count = reinterpret_cast<int (*)(int*)>(dlsym(lib, "cuDeviceGetCount"));
    int n = 0;
    return init && count && init(0) == 0 && count(&n) == 0 && n > 0;
}

} // namespace kl::test
