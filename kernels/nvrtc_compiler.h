#pragma once
// NVRTC -> CUBIN for one exact architecture (no PTX JIT at load), a thread pool, and a content-addressed
// cache on disk keyed by (source, defines, arch, flags, NVRTC version). Works without a GPU. The PTX of the
// same compile is kept next to the CUBIN for the referee's PTX rules. No define tells a candidate it runs
// under the harness: export compiles the same source with the same defines.
#include "core/evaluation.h"
#include "core/kernel_spec.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kl {

struct CompileJob {
    std::string source; // device code with @kl annotations
    ParamValues params; // passed as -DNAME=VALUE
    std::string arch; // "sm_90a"
    std::vector<std::string> kernels; // names from the launch plan; lowered (mangled) names are looked up
    std::vector<std::string> extraFlags;
    std::string name = "candidate.cu";
    // Triton (kernels/triton/triton_compiler.h): compiled by Triton's own compiler in a helper process.
    KernelLanguage language = KernelLanguage::Cuda;
    std::vector<std::string> argTypes; // Triton signature types of the launch arguments ("*bf16", "i32", "fp32")
    std::vector<int> argDivisibility; // a power of 2 each argument is a multiple of (pointers 16, dims multiple_of)
    int numWarps = 4;
    int numStages = 3;
};

// The result of one compile: the report the loop records plus what the worker needs to load it.
struct CompiledModule {
    CompileReport report;
    std::string key; // content address (sha256 hex)
    std::string cubin; // raw bytes
    std::string ptx; // the PTX NVRTC produced on the way to the CUBIN: what the referee's PTX rules judge
    double ptxMs = 0; // time to fetch it from NVRTC (it is generated anyway; this is the copy)
    std::map<std::string, std::string> loweredNames; // launch-plan name -> symbol in the CUBIN
    std::map<std::string, KernelAbi> abi; // launch-plan name -> what its launch adds (Triton); empty for CUDA
};

std::string nvrtcVersionString();
// The CUTLASS/CuTe include folder candidates compile against: $CUTLASS_HOME/include, else the build tree's copy
// from scripts/install-deps; empty when neither holds cute/tensor.hpp.
std::string cutlassIncludeDir();
// Arch name NVRTC wants for a compute capability: 9.0 -> sm_90a (the arch-specific target, so wgmma and
// setmaxnreg work), 10.0 -> sm_100a, others sm_XY.
std::string archForComputeCapability(int major, int minor);
// Parses ptxas -v output into per-kernel resources (keyed by mangled name).
std::vector<CompileReport::KernelResources> parsePtxasInfo(const std::string& log);
std::filesystem::path defaultCompileCacheDir();

class NvrtcCompiler {
public:
    // cacheDir empty: memory cache only. threads 0: hardware concurrency.
    explicit NvrtcCompiler(std::filesystem::path cacheDir = defaultCompileCacheDir(), unsigned threads = 0);
    ~NvrtcCompiler();
    NvrtcCompiler(const NvrtcCompiler&) = delete;
    NvrtcCompiler& operator=(const NvrtcCompiler&) = delete;

    // Blocking compile on the calling thread (with the cache). Thread-safe. Never throws for bad source.
    std::shared_ptr<const CompiledModule> compile(const CompileJob& job);
    // Queued on the pool.
    std::future<std::shared_ptr<const CompiledModule>> submit(CompileJob job);

    std::string cacheKey(const CompileJob& job) const;
    std::vector<std::string> options(const CompileJob& job) const;
    std::size_t cacheHits() const;
    std::size_t compiles() const;
    unsigned threads() const { return static_cast<unsigned>(m_threads.size()); }

private:
    std::shared_ptr<const CompiledModule> compileUncached(const CompileJob& job, const std::string& key);
    std::shared_ptr<const CompiledModule> loadFromDisk(const std::string& key);
    void storeToDisk(const CompiledModule& m);
    void workerLoop();

    std::filesystem::path m_cacheDir;
    std::string m_includeDir;
    std::string m_cutlassIncludeDir; // empty when no CUTLASS headers are installed
    mutable std::mutex m_mutex;
    std::map<std::string, std::shared_ptr<const CompiledModule>> m_memory;
    std::map<std::string, std::shared_future<std::shared_ptr<const CompiledModule>>> m_inFlight;
    std::size_t m_hits = 0;
    std::size_t m_compiles = 0;

    std::mutex m_queueMutex;
    std::condition_variable m_queueCv;
    std::deque<std::function<void()>> m_queue;
    bool m_stopping = false;
    std::vector<std::thread> m_threads;
};

} // namespace kl
