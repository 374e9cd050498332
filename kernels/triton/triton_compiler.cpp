#include "kernels/triton/triton_compiler.h"

#include "core/errors.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

#ifndef KL_TRITON_SCRIPT_PATH
#define KL_TRITON_SCRIPT_PATH "kernels/triton/triton_aot.py"
#endif

namespace kl {

namespace {

    // A compile of one kernel takes seconds; a helper that takes minutes is hung, not slow.
    constexpr double kHelperTimeoutSeconds = 300;

    std::string readAll(const std::filesystem::path& p)
    {
        std::ifstream in(p, std::ios::binary);
        std::ostringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }

    struct HelperRun {
        bool started = false;
        bool timedOut = false;
        int exitCode = -1;
        std::string output; // stdout and stderr together
    };

    HelperRun runHelper(const std::vector<std::string>& args, const std::filesystem::path& dir)
    {
        HelperRun r;
        const std::string outPath = (dir / "helper.log").string();
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        // Triton's own kernel cache stays inside this compile's directory: nothing is reused across candidates
        // behind the content-addressed cache's back.
        std::vector<std::string> env;
        for (char** e = environ; *e; ++e)
            if (std::string(*e).rfind("TRITON_", 0) != 0)
                env.emplace_back(*e);
        env.push_back("TRITON_CACHE_DIR=" + (dir / "triton-cache").string());
        // Line info would name the files of Triton's own install (tl.sum's standard.py under the venv): a path of
        // the compiling machine inside every CUBIN, which an exported bundle must not carry. tritonOptions says so,
        // so the cache key changes with it.
        env.push_back("TRITON_DISABLE_LINE_INFO=1");
        env.push_back("TRITON_HOME=" + dir.string());
        std::vector<char*> argv, envp;
        for (const auto& a : args)
            argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        for (auto& e : env)
            envp.push_back(e.data());
        envp.push_back(nullptr);
        pid_t pid = -1;
        const int rc = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0) {
            r.output = std::string("cannot start ") + args[0] + ": " + std::strerror(rc);
            return r;
        }
        r.started = true;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kHelperTimeoutSeconds);
        int status = 0;
        for (;;) {
            const pid_t w = ::waitpid(pid, &status, WNOHANG);
            if (w == pid)
                break;
            if (w < 0 && errno != EINTR)
                break;
            if (std::chrono::steady_clock::now() > deadline) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, &status, 0);
                r.timedOut = true;
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        r.output = readAll(outPath);
        return r;
    }

    // A fresh private directory per helper run.
    std::filesystem::path makeWorkDir()
    {
        std::string tmpl = (std::filesystem::temp_directory_path() / "kl-triton-XXXXXX").string();
        if (!::mkdtemp(tmpl.data()))
            throw std::runtime_error(
                "cannot create a directory for the Triton compile: " + std::string(std::strerror(errno)));
        return tmpl;
    }

    std::string tritonType(DType t)
    {
        switch (t) {
        case DType::F32:
            return "fp32";
        case DType::F16:
            return "fp16";
        case DType::BF16:
            return "bf16";
        case DType::F64:
            return "fp64";
        case DType::I32:
            return "i32";
        case DType::I64:
            return "i64";
        case DType::U8:
            return "u8";
        case DType::FP8E4M3:
            return "fp8e4nv";
        }
        return "u8";
    }

} // namespace

std::filesystem::path defaultTritonVenvDir()
{
    if (const char* env = std::getenv("KL_TRITON_VENV"))
        return env;
    const std::string leaf = std::string("triton-") + kTritonPinnedVersion;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"))
        return std::filesystem::path(xdg) / "kernelloop" / leaf / "venv";
    if (const char* home = std::getenv("HOME"))
        return std::filesystem::path(home) / ".cache" / "kernelloop" / leaf / "venv";
    return std::filesystem::temp_directory_path() / ("kernelloop-" + leaf) / "venv";
}

std::string tritonPython()
{
    if (const char* env = std::getenv("KL_TRITON_PYTHON"))
        return env;
    const auto venvPython = defaultTritonVenvDir() / "bin" / "python";
    if (std::filesystem::exists(venvPython))
        return venvPython.string();
    return "python3";
}

std::filesystem::path tritonScript()
{
    if (const char* env = std::getenv("KL_TRITON_SCRIPT"))
        return env;
    return KL_TRITON_SCRIPT_PATH;
}

std::string tritonVersion(std::string* why)
{
    static std::mutex mutex;
    static bool probed = false;
    static std::string version, problem;
    std::lock_guard lock(mutex);
    if (!probed) {
        probed = true;
        const std::string python = tritonPython();
        try {
            const auto dir = makeWorkDir();
            const HelperRun r = runHelper({ python, tritonScript().string(), "--version" }, dir);
            std::error_code ec;
            std::filesystem::remove_all(dir, ec);
            std::string out = r.output;
            while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back())))
                out.pop_back();
            const std::string pin = kTritonPinnedVersion;
            const std::string majorMinor = pin.substr(0, pin.rfind('.'));
            if (!r.started || r.exitCode != 0)
                problem = "Triton is not available (" + python + " " + tritonScript().string() + " --version: "
                    + abbreviate(out.empty() ? "no output" : out, 400) + "); scripts/install-deps installs triton=="
                    + pin + " into " + defaultTritonVenvDir().string() + ", or set KL_TRITON_PYTHON";
            else if (out.rfind(majorMinor + ".", 0) != 0)
                problem = python + " has triton " + abbreviate(out, 80) + ", KernelLoop pins " + pin
                    + " (scripts/install-deps installs it, or set KL_TRITON_PYTHON)";
            else
                version = out;
        } catch (const std::exception& e) {
            problem = e.what();
        }
    }
    if (why)
        *why = problem;
    return version;
}

std::string tritonVersionOrWhy()
{
    std::string why;
    const std::string v = tritonVersion(&why);
    return v.empty() ? "unavailable: " + why : v;
}

void prepareTritonJob(CompileJob& job, const KernelSpec& spec, const Problem& problem)
{
    job.language = KernelLanguage::Triton;
    job.name = "candidate.py";
    const LaunchStep& l = spec.launches.front();
    const Bindings b = bindingsFor(job.params, {});
    try {
        job.numWarps = static_cast<int>(l.numWarps.evaluateInt(b));
        job.numStages = static_cast<int>(l.numStages.evaluateInt(b));
    } catch (const ExprError& e) {
        throw InputError("line " + std::to_string(l.line) + ": num_warps/num_stages: " + e.what());
    }
    if (job.numWarps < 1 || job.numWarps > 32 || (job.numWarps & (job.numWarps - 1)) != 0)
        throw InputError("line " + std::to_string(l.line) + ": num_warps is " + std::to_string(job.numWarps)
            + "; it is a power of 2 in [1, 32]");
    if (job.numStages < 1)
        throw InputError("line " + std::to_string(l.line) + ": num_stages is " + std::to_string(job.numStages));
    job.argTypes.clear();
    job.argDivisibility.clear();
    for (const auto& a : l.args) {
        // Harness buffers are 256-byte aligned; a dim is a multiple of the power of 2 in its multiple_of.
        const DimSpec* dim = problem.dim(a);
        const std::int64_t pow2 = dim ? dim->multipleOf & -dim->multipleOf : 0;
        job.argDivisibility.push_back(pow2 > 1 ? static_cast<int>(std::min<std::int64_t>(16, pow2)) : 0);
        if (const TensorSpec* t = problem.tensor(a))
            job.argTypes.push_back("*" + tritonType(t->dtype));
        else if (std::any_of(spec.workspaces.begin(), spec.workspaces.end(),
                     [&](const WorkspaceSpec& w) { return w.name == a; }))
            job.argTypes.push_back("*u8");
        else if (const auto sc = std::find_if(
                     problem.scalars.begin(), problem.scalars.end(), [&](const ScalarSpec& s) { return s.name == a; });
                 sc != problem.scalars.end())
            job.argTypes.push_back(sc->dtype == DType::I32 ? "i32" : "fp32");
        else if (dim || spec.param(a))
            job.argTypes.push_back("i32");
        else
            throw InputError("line " + std::to_string(l.line) + ": @kl:launch argument '" + abbreviate(a)
                + "' is not a tensor, workspace, dim, scalar or parameter of " + problem.name);
        if (job.argTypes.back().front() == '*')
            job.argDivisibility.back() = 16;
    }
}

std::vector<std::string> tritonOptions(const CompileJob& job)
{
    std::vector<std::string> o = { "--arch=" + job.arch, "--num-warps=" + std::to_string(job.numWarps),
        "--num-stages=" + std::to_string(job.numStages), "--no-line-info" };
    for (const auto& [k, v] : job.params)
        o.push_back("--constexpr " + k + "=" + std::to_string(v));
    for (std::size_t i = 0; i < job.argTypes.size(); ++i)
        o.push_back("--arg " + job.argTypes[i] + " divisible by "
            + std::to_string(i < job.argDivisibility.size() ? job.argDivisibility[i] : 0));
    return o;
}

bool compileTriton(const CompileJob& job, CompiledModule& m)
{
    const auto t0 = std::chrono::steady_clock::now();
    const auto elapsed
        = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
    std::string why;
    const std::string version = tritonVersion(&why);
    if (version.empty()) {
        m.report.ok = false;
        m.report.log = why;
        return false;
    }
    if (job.kernels.size() != 1) {
        m.report.log = "a Triton candidate launches exactly one @triton.jit kernel";
        return true;
    }
    std::filesystem::path dir;
    try {
        dir = makeWorkDir();
    } catch (const std::exception& e) {
        m.report.log = e.what();
        return false;
    }
    nlohmann::json req = { { "source", job.source }, { "kernel", job.kernels.front() }, { "params", job.params },
        { "arg_types", job.argTypes }, { "num_warps", job.numWarps }, { "num_stages", job.numStages },
        { "arch", job.arch }, { "divisibility", job.argDivisibility } };
    {
        std::ofstream out(dir / "request.json");
        out << req.dump();
    }
    const HelperRun r
        = runHelper({ tritonPython(), tritonScript().string(), (dir / "request.json").string(), dir.string() }, dir);
    bool ran = false;
    const std::string resultText = readAll(dir / "result.json");
    if (r.timedOut) {
        m.report.log = "Triton " + version + ": the compile helper ran past "
            + std::to_string(int(kHelperTimeoutSeconds)) + " s and was stopped";
        ran = true;
    } else if (resultText.empty()) {
        m.report.log = "Triton " + version + ": the compile helper wrote no result (exit " + std::to_string(r.exitCode)
            + "): " + abbreviate(r.output, 2000);
    } else {
        try {
            const auto res = nlohmann::json::parse(resultText);
            ran = true;
            if (!res.at("ok").get<bool>()) {
                m.report.log = "Triton " + version + ": " + res.at("log").get<std::string>();
            } else if (res.at("global_scratch_size").get<int>() > 0 || res.at("profile_scratch_size").get<int>() > 0) {
                m.report.log = "Triton " + version + ": the kernel needs "
                    + std::to_string(res.at("global_scratch_size").get<int>())
                    + " bytes of global scratch per program, which the harness does not allocate (declare a "
                      "@kl:workspace and pass it instead)";
            } else {
                m.cubin = readAll(dir / "kernel.cubin");
                m.ptx = readAll(dir / "kernel.ptx");
                const std::string kernel = job.kernels.front();
                m.loweredNames[kernel] = res.at("name").get<std::string>();
                m.abi[kernel] = { res.at("shared").get<int>(), res.at("extra_pointer_args").get<int>() };
                CompileReport::KernelResources k;
                k.kernel = kernel;
                k.staticSharedBytes = 0;
                k.maxThreadsPerBlock = 32 * res.at("num_warps").get<int>();
                m.report.kernels.push_back(k);
                m.report.ok = !m.cubin.empty() && !m.ptx.empty();
                m.report.log = "Triton " + version + ": " + std::to_string(res.at("shared").get<int>())
                    + " bytes of dynamic shared memory, num_warps " + std::to_string(job.numWarps) + ", num_stages "
                    + std::to_string(job.numStages) + (m.report.ok ? "" : "; the helper returned no CUBIN or PTX");
            }
        } catch (const std::exception& e) {
            m.report.log = "Triton " + version + ": unreadable helper result: " + e.what();
            ran = false;
        }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    m.report.compileMs = elapsed();
    return ran;
}

} // namespace kl
