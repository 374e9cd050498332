// libkl_cupti_inject.so: loaded into any CUDA program through CUDA_INJECTION64_PATH (the driver calls
// InitializeInjection at cuInit) and NVTX_INJECTION64_PATH (NVTX calls InitializeInjectionNvtx2 on first use).
// Records stream to $KL_TRACE_OUT.partial as CUPTI delivers buffers; at exit the file is renamed to $KL_TRACE_OUT,
// so a target that crashes still leaves a readable prefix.
#include "profiler/cupti/collector.h"

#include <cstdio>
#include <cstdlib>
#include <cupti.h>
#include <dlfcn.h>
#include <fstream>
#include <mutex>
#include <string>
#include <unistd.h>

namespace {

std::once_flag g_once;
std::FILE* g_file = nullptr;
std::string g_path;
std::mutex g_fileMutex;

std::string commandLine()
{
    std::ifstream f("/proc/self/cmdline", std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (char& c : s)
        if (c == '\0')
            c = ' ';
    while (!s.empty() && s.back() == ' ')
        s.pop_back();
    return s;
}

void writeLines(const std::string& lines)
{
    std::lock_guard<std::mutex> lock(g_fileMutex);
    if (!g_file)
        return;
    std::fwrite(lines.data(), 1, lines.size(), g_file);
    std::fflush(g_file);
}

void finish()
{
    std::string e = kl::prof::cupti::stopCollection();
    std::lock_guard<std::mutex> lock(g_fileMutex);
    if (!g_file)
        return;
    if (!e.empty()) {
        std::string w = "{\"t\":\"warn\",\"n\":" + kl::prof::cupti::jsonEscape(e) + "}\n";
        std::fwrite(w.data(), 1, w.size(), g_file);
    }
    std::fflush(g_file);
    fsync(fileno(g_file));
    std::fclose(g_file);
    g_file = nullptr;
    std::rename((g_path + ".partial").c_str(), g_path.c_str());
}

// Flush while the context still exists: at process exit the CUDA runtime may tear contexts down before our
// atexit handler runs (it registers its own handler after ours when NVTX initialised us first).
void CUPTIAPI onResource(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void*)
{
    if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
        kl::prof::cupti::flushCollection();
}

void start()
{
    std::call_once(g_once, [] {
        const char* out = std::getenv("KL_TRACE_OUT");
        g_path = out && *out ? out : "kloop-" + std::to_string(getpid()) + ".kltrace";
        g_file = std::fopen((g_path + ".partial").c_str(), "wb");
        if (!g_file) {
            std::fprintf(stderr, "kl_cupti_inject: cannot write %s.partial; not tracing\n", g_path.c_str());
            return;
        }
        std::string header = kl::prof::cupti::headerLine(getpid(), commandLine());
        std::fwrite(header.data(), 1, header.size(), g_file);
        kl::prof::cupti::CollectorOptions opts;
        opts.flushPeriodMs = 500;
        std::string e = kl::prof::cupti::startCollection(opts, writeLines);
        if (!e.empty()) {
            std::fprintf(stderr, "kl_cupti_inject: %s; not tracing\n", e.c_str());
            std::string w = "{\"t\":\"warn\",\"n\":" + kl::prof::cupti::jsonEscape(e) + "}\n";
            std::fwrite(w.data(), 1, w.size(), g_file);
            std::fclose(g_file);
            g_file = nullptr;
            std::rename((g_path + ".partial").c_str(), g_path.c_str());
            return;
        }
        CUpti_SubscriberHandle subscriber = nullptr;
        if (cuptiSubscribe(&subscriber, onResource, nullptr) == CUPTI_SUCCESS)
            cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
        std::atexit(finish);
    });
}

} // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void)
{
    start();
    return 1;
}

// NVTX injection goes to CUPTI itself (that is what makes MARKER records appear); we only make sure the
// collector runs first so no range is missed when NVTX is used before CUDA initialises.
using NvtxGetExportTable = const void* (*)(uint32_t);
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTable getTable)
{
    start();
    Dl_info info {};
    if (!dladdr(reinterpret_cast<void*>(&cuptiGetVersion), &info) || !info.dli_fname)
        return 0;
    void* cupti = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!cupti)
        return 0;
    using Init = int (*)(NvtxGetExportTable);
    auto init = reinterpret_cast<Init>(dlsym(cupti, "InitializeInjectionNvtx2"));
    int rc = init ? init(getTable) : 0;
    dlclose(cupti);
    return rc;
}
