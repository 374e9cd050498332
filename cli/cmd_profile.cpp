// kloop profile -- <command> [args]: trace any CUDA program through the CUPTI injection library.
#include "cli/command.h"
#include "core/errors.h"
#include "kl_profiler_paths.h"
#include "profiler/analysis.h"
#include "profiler/importers.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace kl::cli {
namespace {

    std::string findInjectionLibrary(const Args& a)
    {
        if (auto lib = a.option("lib"))
            return *lib;
        if (const char* env = std::getenv("KL_CUPTI_INJECT"); env && *env)
            return env;
        std::error_code ec;
        fs::path exe = fs::read_symlink("/proc/self/exe", ec);
        if (!ec) {
            for (const fs::path& p :
                { exe.parent_path() / "../lib/libkl_cupti_inject.so", exe.parent_path() / "libkl_cupti_inject.so",
                    exe.parent_path() / "../profiler/libkl_cupti_inject.so" })
                if (fs::exists(p, ec))
                    return fs::weakly_canonical(p, ec).string();
        }
#ifdef KL_CUPTI_INJECT_BUILD_PATH
        if (fs::exists(KL_CUPTI_INJECT_BUILD_PATH, ec))
            return KL_CUPTI_INJECT_BUILD_PATH;
#endif
        return {};
    }

    // A target that crashed leaves <out>.partial; keep every complete line so it still imports.
    bool salvagePartial(const std::string& out)
    {
        std::string partial = out + ".partial";
        std::ifstream in(partial, std::ios::binary);
        if (!in)
            return false;
        std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        auto nl = s.rfind('\n');
        if (nl == std::string::npos)
            return false;
        s.resize(nl + 1);
        std::ofstream o(out, std::ios::binary | std::ios::trunc);
        o << s;
        o.close();
        std::remove(partial.c_str());
        return static_cast<bool>(o);
    }

    // --sol is the "profile sol" command (cmd_profile_sol.cpp), found at run time so that builds without the GPU
    // worker (the profiler-only kloop of the profiler's tests) still link.
    int runProfileSolCommand(const Args& a)
    {
        for (const auto& c : commands())
            if (c.path == "profile sol")
                return c.run(a);
        std::cerr << "kloop profile --sol: this kloop was built without the GPU worker (kernels module), which "
                     "collects the counters\n";
        return kExitFailure;
    }

    int runProfile(const Args& a)
    {
        if (a.has("sol"))
            return runProfileSolCommand(a);
        if (a.rest().empty()) {
            std::cerr
                << "usage: kloop profile [--out FILE.kltrace] [--lib libkl_cupti_inject.so] [--json] [--quiet] -- "
                   "<command> [args]\n"
                   "       kloop profile --sol --problem P (--candidate FILE.cu [--params K=V,..] | --session DIR "
                   "[--node ID]) [--shape T=..,H=..] [--out FILE.kltrace] [--json]\n";
            return kExitUsage;
        }
        std::string lib = findInjectionLibrary(a);
        if (lib.empty()) {
            std::cerr << "kloop profile: libkl_cupti_inject.so not found (this kloop was built without CUPTI, or pass "
                         "--lib)\n";
            return kExitFailure;
        }
        std::string out = a.optionOr("out", "kloop-profile.kltrace");
        out = fs::absolute(out).string();
        std::remove(out.c_str());
        std::remove((out + ".partial").c_str());

        pid_t child = fork();
        if (child < 0) {
            std::cerr << "kloop profile: fork failed: " << std::strerror(errno) << "\n";
            return kExitFailure;
        }
        if (child == 0) {
            setenv("CUDA_INJECTION64_PATH", lib.c_str(), 1);
            setenv("NVTX_INJECTION64_PATH", lib.c_str(), 1);
            setenv("KL_TRACE_OUT", out.c_str(), 1);
            std::vector<char*> argv;
            for (const auto& s : a.rest())
                argv.push_back(const_cast<char*>(s.c_str()));
            argv.push_back(nullptr);
            execvp(argv[0], argv.data());
            std::fprintf(stderr, "kloop profile: cannot run %s: %s\n", argv[0], std::strerror(errno));
            _exit(127);
        }
        // The target gets Ctrl-C itself (same process group); we only wait for it.
        std::signal(SIGINT, SIG_IGN);
        int status = 0;
        while (waitpid(child, &status, 0) < 0 && errno == EINTR) { }
        std::signal(SIGINT, SIG_DFL);
        int childRc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        if (childRc == 127 && WIFEXITED(status))
            return kExitFailure;
        if (WIFSIGNALED(status))
            std::cerr << "kloop profile: warning: the target died with signal " << WTERMSIG(status)
                      << "; keeping the records flushed so far\n";
        std::error_code ec;
        if (!fs::exists(out, ec) && !salvagePartial(out)) {
            std::cerr << "kloop profile: no trace was written (the program never initialised CUDA, or CUPTI failed to "
                         "load)\n";
            return kExitFailure;
        }
        try {
            prof::Trace t = prof::importKlTraceFile(out);
            prof::Analysis an = prof::analyze(t);
            if (a.has("json")) {
                nlohmann::json j = prof::toJson(an);
                j["trace_file"] = out;
                j["exit_code"] = childRc;
                std::cout << j.dump(2) << "\n";
            } else {
                std::cerr << "kloop profile: wrote " << out << " (" << t.eventCount() << " events; target exit code "
                          << childRc << ")\n";
                if (!a.has("quiet"))
                    std::cout << prof::toText(an);
            }
        } catch (const InputError& e) {
            std::cerr << "kloop profile: the capture is unreadable: " << e.what() << "\n";
            return kExitFailure;
        }
        return childRc == 0 ? kExitOk : kExitFailure;
    }

    const CommandRegistration reg { { "profile", "trace a CUDA program (kernels, copies, API calls, NVTX) via CUPTI",
        "kloop profile [--out FILE.kltrace] [--lib PATH] [--json] [--quiet] -- <command> [args]\n\n"
        "Runs the command with the CUPTI injection library (CUDA_INJECTION64_PATH, NVTX_INJECTION64_PATH), records\n"
        "concurrent-kernel, memcpy/memset, runtime/driver API and NVTX marker activity, writes FILE.kltrace\n"
        "(default kloop-profile.kltrace) and prints the bottleneck summary. Records are flushed every 500 ms, so a\n"
        "crashing target still leaves a readable trace. Analyze or convert later with kloop trace analyze|export.\n\n"
        "kloop profile --sol --problem P (--candidate FILE.cu [--params K=V,..] | --session DIR [--node ID])\n"
        "    [--shape T=..,H=..] [--launches N] [--no-counters] [--out FILE.kltrace] [--json]\n"
        "Profiles the problem's baseline and a candidate in the GPU worker: speed-of-light counters (DRAM %, SM %,\n"
        "achieved occupancy) through CUPTI's range profiler, the bottleneck class, and a trace with the rows\n"
        "\"baseline\" and \"candidate\" (see kloop help profile sol).",
        { "json", "quiet", "sol", "no-counters" },
        // --sol hands these to kloop profile sol
        { "out", "lib", "problem", "candidate", "session", "node", "params", "shape", "launches" }, &runProfile } };

} // namespace
} // namespace kl::cli
