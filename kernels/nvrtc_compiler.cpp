#include "kernels/nvrtc_compiler.h"

#include "core/session_store.h"
#include "kernels/triton/triton_compiler.h"
#include "kernels/worker_protocol.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <nvrtc.h>
#include <regex>
#include <sstream>
#include <unistd.h>

#ifndef KL_CUDA_INCLUDE_DIR
#define KL_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif
#ifndef KL_CUTLASS_INCLUDE_DIR
#define KL_CUTLASS_INCLUDE_DIR ""
#endif

namespace kl {

namespace {

    // Bumped when the options or the report format change, so stale cache entries are not reused.
    constexpr const char* kCacheFormat = "kl-nvrtc-2";

    std::string readAll(const std::filesystem::path& p)
    {
        std::ifstream in(p, std::ios::binary);
        if (!in)
            return {};
        std::ostringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }

    void writeAtomic(const std::filesystem::path& p, const std::string& data)
    {
        const auto tmp = p.string() + ".tmp" + std::to_string(::getpid()) + "."
            + std::to_string(std::hash<std::thread::id> {}(std::this_thread::get_id()));
        {
            std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
            if (!out)
                return;
            out.write(data.data(), static_cast<std::streamsize>(data.size()));
            if (!out)
                return;
        }
        std::error_code ec;
        std::filesystem::rename(tmp, p, ec);
        if (ec)
            std::filesystem::remove(tmp, ec);
    }

    std::string cudaIncludeDir()
    {
        if (const char* env = std::getenv("KL_CUDA_INCLUDE"))
            return env;
        if (const char* home = std::getenv("CUDA_HOME")) {
            const std::string inc = std::string(home) + "/include";
            if (std::filesystem::exists(inc + "/cuda_bf16.h"))
                return inc;
        }
        return KL_CUDA_INCLUDE_DIR;
    }

    nlohmann::json reportToJson(const CompiledModule& m)
    {
        nlohmann::json j;
        j["format"] = kCacheFormat;
        j["ok"] = m.report.ok;
        j["log"] = m.report.log;
        j["compile_ms"] = m.report.compileMs;
        j["lowered"] = m.loweredNames;
        j["abi"] = wire::toJson(m.abi);
        auto& ks = j["kernels"] = nlohmann::json::array();
        for (const auto& k : m.report.kernels)
            ks.push_back({ { "kernel", k.kernel }, { "registers", k.registers }, { "spill_stores", k.spillStores },
                { "spill_loads", k.spillLoads }, { "static_shared", k.staticSharedBytes }, { "local", k.localBytes },
                { "max_threads", k.maxThreadsPerBlock } });
        return j;
    }

} // namespace

std::string nvrtcVersionString()
{
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    return std::to_string(major) + "." + std::to_string(minor);
}

std::string cutlassIncludeDir()
{
    auto holdsCute = [](const std::string& dir) {
        return !dir.empty() && std::filesystem::exists(std::filesystem::path(dir) / "cute" / "tensor.hpp");
    };
    if (const char* home = std::getenv("CUTLASS_HOME"); home && holdsCute(std::string(home) + "/include"))
        return std::string(home) + "/include";
    return holdsCute(KL_CUTLASS_INCLUDE_DIR) ? KL_CUTLASS_INCLUDE_DIR : "";
}

std::string archForComputeCapability(int major, int minor)
{
    std::string arch = "sm_" + std::to_string(major) + std::to_string(minor);
    if ((major == 9 && minor == 0) || (major == 10 && minor == 0))
        arch += "a";
    return arch;
}

std::vector<CompileReport::KernelResources> parsePtxasInfo(const std::string& log)
{
    std::vector<CompileReport::KernelResources> out;
    static const std::regex entry(R"(Compiling entry function '([^']+)')");
    static const std::regex props(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
    static const std::regex used(R"(Used (\d+) registers)");
    static const std::regex smem(R"((\d+) bytes smem)");
    std::istringstream in(log);
    std::string line;
    CompileReport::KernelResources* cur = nullptr;
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_search(line, m, entry)) {
            out.push_back({});
            cur = &out.back();
            cur->kernel = m[1];
            continue;
        }
        if (!cur)
            continue;
        if (std::regex_search(line, m, props)) {
            cur->localBytes = std::stoi(m[1]);
            cur->spillStores = std::stoi(m[2]);
            cur->spillLoads = std::stoi(m[3]);
        }
        if (std::regex_search(line, m, used))
            cur->registers = std::stoi(m[1]);
        if (std::regex_search(line, m, smem))
            cur->staticSharedBytes = std::stoi(m[1]);
    }
    return out;
}

std::filesystem::path defaultCompileCacheDir()
{
    if (const char* env = std::getenv("KL_CACHE_DIR"))
        return std::filesystem::path(env) / "cubin";
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"))
        return std::filesystem::path(xdg) / "kernelloop" / "cubin";
    if (const char* home = std::getenv("HOME"))
        return std::filesystem::path(home) / ".cache" / "kernelloop" / "cubin";
    return std::filesystem::temp_directory_path() / "kernelloop-cubin";
}

NvrtcCompiler::NvrtcCompiler(std::filesystem::path cacheDir, unsigned threads)
    : m_cacheDir(std::move(cacheDir))
    , m_includeDir(cudaIncludeDir())
    , m_cutlassIncludeDir(cutlassIncludeDir())
{
    if (!m_cacheDir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(m_cacheDir, ec);
        if (ec)
            m_cacheDir.clear();
    }
    if (threads == 0)
        threads = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < threads; ++i)
        m_threads.emplace_back([this] { workerLoop(); });
}

NvrtcCompiler::~NvrtcCompiler()
{
    {
        std::lock_guard lock(m_queueMutex);
        m_stopping = true;
    }
    m_queueCv.notify_all();
    for (auto& t : m_threads)
        t.join();
}

void NvrtcCompiler::workerLoop()
{
    for (;;) {
        std::function<void()> task;
        {
            std::unique_lock lock(m_queueMutex);
            m_queueCv.wait(lock, [&] { return m_stopping || !m_queue.empty(); });
            if (m_queue.empty())
                return;
            task = std::move(m_queue.front());
            m_queue.pop_front();
        }
        task();
    }
}

std::vector<std::string> NvrtcCompiler::options(const CompileJob& job) const
{
    if (job.language == KernelLanguage::Triton)
        return tritonOptions(job);
    std::vector<std::string> o = { "--gpu-architecture=" + job.arch, "-std=c++17", "-I" + m_includeDir,
        "-I" + m_includeDir + "/cccl", "--ptxas-options=-v", "-lineinfo", "-default-device" };
    // The path names the pinned release, so the cache key changes with it.
    if (!m_cutlassIncludeDir.empty())
        o.push_back("-I" + m_cutlassIncludeDir);
    for (const auto& [k, v] : job.params)
        o.push_back("-D" + k + "=" + std::to_string(v));
    for (const auto& f : job.extraFlags)
        o.push_back(f);
    return o;
}

std::string NvrtcCompiler::cacheKey(const CompileJob& job) const
{
    std::string material = std::string(kCacheFormat) + "\n"
        + (job.language == KernelLanguage::Triton ? "triton " + tritonVersionOrWhy() : "nvrtc " + nvrtcVersionString())
        + "\n";
    for (const auto& o : options(job))
        material += o + "\n";
    for (const auto& k : job.kernels)
        material += "kernel " + k + "\n";
    material += "source\n" + job.source;
    return sha256Hex(material);
}

std::size_t NvrtcCompiler::cacheHits() const
{
    std::lock_guard lock(m_mutex);
    return m_hits;
}

std::size_t NvrtcCompiler::compiles() const
{
    std::lock_guard lock(m_mutex);
    return m_compiles;
}

std::shared_ptr<const CompiledModule> NvrtcCompiler::loadFromDisk(const std::string& key)
{
    if (m_cacheDir.empty())
        return nullptr;
    const std::string meta = readAll(m_cacheDir / (key + ".json"));
    if (meta.empty())
        return nullptr;
    try {
        const auto j = nlohmann::json::parse(meta);
        if (j.value("format", "") != kCacheFormat)
            return nullptr;
        auto m = std::make_shared<CompiledModule>();
        m->key = key;
        m->report.ok = j.at("ok").get<bool>();
        m->report.log = j.at("log").get<std::string>();
        m->report.compileMs = j.at("compile_ms").get<double>();
        m->loweredNames = j.at("lowered").get<std::map<std::string, std::string>>();
        m->abi = wire::kernelAbi(j.value("abi", nlohmann::json::object()));
        for (const auto& k : j.at("kernels")) {
            CompileReport::KernelResources r;
            r.kernel = k.at("kernel");
            r.registers = k.at("registers");
            r.spillStores = k.at("spill_stores");
            r.spillLoads = k.at("spill_loads");
            r.staticSharedBytes = k.at("static_shared");
            r.localBytes = k.at("local");
            r.maxThreadsPerBlock = k.at("max_threads");
            m->report.kernels.push_back(r);
        }
        m->ptx = readAll(m_cacheDir / (key + ".ptx"));
        if (m->report.ok) {
            m->cubin = readAll(m_cacheDir / (key + ".cubin"));
            if (m->cubin.empty() || m->ptx.empty())
                return nullptr;
        }
        m->report.cacheHit = true;
        return m;
    } catch (const std::exception&) {
        return nullptr; // a damaged cache entry is recompiled, never trusted
    }
}

void NvrtcCompiler::storeToDisk(const CompiledModule& m)
{
    if (m_cacheDir.empty())
        return;
    if (m.report.ok)
        writeAtomic(m_cacheDir / (m.key + ".cubin"), m.cubin);
    if (!m.ptx.empty())
        writeAtomic(m_cacheDir / (m.key + ".ptx"), m.ptx);
    writeAtomic(m_cacheDir / (m.key + ".json"), reportToJson(m).dump());
}

std::shared_ptr<const CompiledModule> NvrtcCompiler::compile(const CompileJob& job)
{
    const std::string key = cacheKey(job);
    std::shared_ptr<std::promise<std::shared_ptr<const CompiledModule>>> mine;
    std::shared_future<std::shared_ptr<const CompiledModule>> theirs;
    {
        std::lock_guard lock(m_mutex);
        if (auto it = m_memory.find(key); it != m_memory.end()) {
            ++m_hits;
            auto copy = std::make_shared<CompiledModule>(*it->second);
            copy->report.cacheHit = true;
            return copy;
        }
        if (auto it = m_inFlight.find(key); it != m_inFlight.end()) {
            theirs = it->second;
        } else {
            mine = std::make_shared<std::promise<std::shared_ptr<const CompiledModule>>>();
            m_inFlight[key] = mine->get_future().share();
        }
    }
    if (!mine) {
        auto r = std::make_shared<CompiledModule>(*theirs.get());
        r->report.cacheHit = true;
        std::lock_guard lock(m_mutex);
        ++m_hits;
        return r;
    }
    std::shared_ptr<const CompiledModule> result = loadFromDisk(key);
    const bool fromDisk = result != nullptr;
    if (!result)
        result = compileUncached(job, key);
    {
        std::lock_guard lock(m_mutex);
        m_memory[key] = result;
        m_inFlight.erase(key);
        if (fromDisk)
            ++m_hits;
        else
            ++m_compiles;
    }
    mine->set_value(result);
    return result;
}

std::future<std::shared_ptr<const CompiledModule>> NvrtcCompiler::submit(CompileJob job)
{
    auto task = std::make_shared<std::packaged_task<std::shared_ptr<const CompiledModule>()>>(
        [this, j = std::move(job)] { return compile(j); });
    auto fut = task->get_future();
    {
        std::lock_guard lock(m_queueMutex);
        m_queue.emplace_back([task] { (*task)(); });
    }
    m_queueCv.notify_one();
    return fut;
}

std::shared_ptr<const CompiledModule> NvrtcCompiler::compileUncached(const CompileJob& job, const std::string& key)
{
    auto m = std::make_shared<CompiledModule>();
    m->key = key;
    if (job.language == KernelLanguage::Triton) {
        if (compileTriton(job, *m)) // an unavailable Triton is this machine's state, not the candidate's: not cached
            storeToDisk(*m);
        return m;
    }
    const auto t0 = std::chrono::steady_clock::now();
    nvrtcProgram prog = nullptr;
    if (nvrtcCreateProgram(&prog, job.source.c_str(), job.name.c_str(), 0, nullptr, nullptr) != NVRTC_SUCCESS) {
        m->report.log = "nvrtcCreateProgram failed";
        return m;
    }
    for (const auto& k : job.kernels)
        nvrtcAddNameExpression(prog, k.c_str());
    const auto opts = options(job);
    std::vector<const char*> argv;
    for (const auto& o : opts)
        argv.push_back(o.c_str());
    const nvrtcResult rc = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
    std::size_t logSize = 0;
    nvrtcGetProgramLogSize(prog, &logSize);
    std::string log(logSize, '\0');
    if (logSize)
        nvrtcGetProgramLog(prog, log.data());
    while (!log.empty() && log.back() == '\0')
        log.pop_back();
    m->report.log = log;
    if (rc == NVRTC_SUCCESS) {
        std::size_t size = 0;
        if (nvrtcGetCUBINSize(prog, &size) == NVRTC_SUCCESS && size > 0) {
            m->cubin.resize(size);
            nvrtcGetCUBIN(prog, m->cubin.data());
            m->report.ok = true;
        } else {
            m->report.log += "\nNVRTC produced no CUBIN for " + job.arch + " (is the arch name right?)";
        }
        for (const auto& k : job.kernels) {
            const char* lowered = nullptr;
            if (nvrtcGetLoweredName(prog, k.c_str(), &lowered) == NVRTC_SUCCESS && lowered)
                m->loweredNames[k] = lowered;
            else {
                m->report.ok = false;
                m->report.log += "\nlaunch plan names kernel '" + k + "', which the source does not define";
            }
        }
    } else {
        m->report.log = std::string("NVRTC: ") + nvrtcGetErrorString(rc) + "\n" + log;
    }
    // The PTX exists once NVVM succeeded, even when ptxas then failed (an unresolved device-runtime call): the
    // referee still names what the code does.
    const auto p0 = std::chrono::steady_clock::now();
    std::size_t ptxSize = 0;
    if (nvrtcGetPTXSize(prog, &ptxSize) == NVRTC_SUCCESS && ptxSize > 1) {
        m->ptx.resize(ptxSize);
        nvrtcGetPTX(prog, m->ptx.data());
        while (!m->ptx.empty() && m->ptx.back() == '\0')
            m->ptx.pop_back();
    } else if (m->report.ok) {
        m->report.ok = false; // the referee judges the PTX: a module without one is not trusted
        m->report.log += "\nNVRTC returned no PTX for " + job.arch;
    }
    m->ptxMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
    nvrtcDestroyProgram(&prog);
    m->report.kernels = parsePtxasInfo(log);
    // Name the resources by launch-plan names where we can, so reports read like the source.
    for (auto& r : m->report.kernels)
        for (const auto& [name, lowered] : m->loweredNames)
            if (r.kernel == lowered)
                r.kernel = name;
    m->report.compileMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    storeToDisk(*m);
    return m;
}

} // namespace kl
