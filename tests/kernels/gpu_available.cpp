#include <dlfcn.h>

// True when a CUDA driver and at least one device exist. Uses dlopen so the test binary itself never needs
// libcuda.so.1 (CI machines have none).
bool klCudaDeviceAvailable()
{
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return false;
    auto init = reinterpret_cast<int (*)(unsigned)>(dlsym(lib, "cuInit"));
    auto count = reinterpret_cast<int (*)(int*)>(dlsym(lib, "cuDeviceGetCount"));
    int n = 0;
    const bool ok = init && count && init(0) == 0 && count(&n) == 0 && n > 0;
    return ok;
}
