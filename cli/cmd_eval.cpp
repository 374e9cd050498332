// kloop eval: one candidate through the harness (compile, verify with held-out shapes, time against the
// baseline) and its verdict with every reason. --compile-only works without a GPU (give --arch).
#include "cli/command.h"
#include "core/catalogue.h"
#include "core/current_best.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/loop_device_limits.h"
#include "core/session_store.h"
#include "kl_build_features.h"

#if KL_FEATURE_CUDA
#include "kernels/gpu_evaluator.h"
#include "kernels/referee/referee.h"
#include "kernels/worker_protocol.h"
#endif

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

namespace kl::cli {
namespace {

    [[maybe_unused]] ParamValues parseParams(const std::string& text) // unused without CUDA
    {
        ParamValues p;
        std::stringstream ss(text);
        std::string item;
        while (std::getline(ss, item, ',')) {
            if (item.empty())
                continue;
            const auto eq = item.find('=');
            if (eq == std::string::npos)
                throw InputError("--params expects NAME=VALUE[,NAME=VALUE...], got '" + item + "'");
            try {
                p[item.substr(0, eq)] = std::stoll(item.substr(eq + 1));
            } catch (const std::exception&) {
                throw InputError("--params: '" + item.substr(eq + 1) + "' is not an integer");
            }
        }
        return p;
    }

    // Why the candidate cannot run on the device, found before anything compiles: the problem's "min_arch", then
    // the device limits (parameter values the architecture lacks, launch geometry, shared memory).
    [[maybe_unused]] std::optional<std::string> refusalBeforeCompile(
        const Problem& problem, const Candidate& c, const DeviceInfo& device)
    {
        if (std::string why = problem.archRefusal(archNumber(device)); !why.empty())
            return why;
        const KernelSpec spec = parseKernelSpec(c.source);
        ParamValues params = spec.defaults();
        for (const auto& [name, value] : c.params)
            params[name] = value;
        if (auto why = checkDeviceLimits(spec, params, shapesOf(problem), device))
            return why->rule + ": " + why->message;
        return std::nullopt;
    }

    int runEval(const Args& a)
    {
#if KL_FEATURE_CUDA
        if (a.positionals().empty()) {
            std::cerr
                << "usage: kloop eval <problem> [candidate.cu] [--params K=V,...] [--compile-only --arch sm_90a]\n";
            return kExitUsage;
        }
        EvaluateOptions opt;
        opt.maxSecondsPerShape = a.real("seconds", 1.0, 0.001, 3600);
        opt.heldOutCount = static_cast<int>(a.integer("held-out", 4, 0, 1000));
        opt.seed = static_cast<std::uint64_t>(a.integer("seed", 0, 0, std::numeric_limits<long long>::max()));
        try {
            Problem problem = loadProblem(findProblemFolder(a.positionals()[0]).string());
            std::optional<KernelLanguage> declared;
            if (auto l = a.option("language")) {
                declared = languageFromName(*l);
                if (!declared)
                    throw InputError("--language must be cuda or triton, got '" + *l + "'");
                if (a.positionals().size() == 1)
                    useTemplateFor(problem, *declared);
            }
            GpuEvaluatorOptions o;
            if (auto arch = a.option("arch"))
                o.arch = *arch;
            o.graphMode = a.optionOr("graph-mode", "auto");
            if (!wire::isGraphMode(o.graphMode))
                throw InputError("--graph-mode must be auto, always or never, got '" + o.graphMode + "'");
            GpuEvaluator ev(problem, o);
            Candidate c = ev.templateCandidate(parseParams(a.optionOr("params", "")), "cli");
            if (a.positionals().size() > 1) {
                if (std::filesystem::is_directory(a.positionals()[1]))
                    throw InputError(a.positionals()[1] + " is a directory, not a candidate .cu file");
                std::ifstream in(a.positionals()[1]);
                if (!in)
                    throw InputError(a.positionals()[1] + ": cannot read");
                std::ostringstream s;
                s << in.rdbuf();
                c.source = s.str();
                if (!declared)
                    declared = languageOfFileName(a.positionals()[1]);
                if (declared)
                    requireLanguage(c.source, *declared, a.positionals()[1]);
                c.params = parseParams(a.optionOr("params", ""));
                c.author = Author::Human;
            }
            if (a.has("compile-only")) {
                if (o.arch.empty()) {
                    std::cerr << "kloop eval: --compile-only needs --arch (e.g. sm_90a) when no GPU is asked\n";
                    return kExitUsage;
                }
                if (!archNumber(o.arch)) {
                    std::cerr << "kloop eval: --arch '" << o.arch << "' is not an architecture like sm_86 or sm_90a\n";
                    return kExitUsage;
                }
                DeviceInfo target;
                target.arch = o.arch;
                if (auto why = refusalBeforeCompile(problem, c, target)) {
                    std::cerr << "kloop eval: " << *why << " (nothing compiled)\n";
                    return kExitFailure;
                }
                const auto m = ev.compileModule(c);
                // The referee's static layers need no GPU either: the source rules and the rules on the PTX.
                std::vector<VerdictReason> reasons;
                reasons = referee::checkSource(c.source, problem);
                for (auto& r : referee::checkPtx(m->ptx, problem, parseKernelSpec(c.source),
                         detectLanguage(c.source) == KernelLanguage::Triton ? "candidate.py" : "candidate.cu"))
                    reasons.push_back(std::move(r));
                const bool rejected
                    = std::any_of(reasons.begin(), reasons.end(), [](const VerdictReason& r) { return r.blocking; });
                if (a.has("json")) {
                    Json j = { { "ok", m->report.ok }, { "log", m->report.log }, { "compile_ms", m->report.compileMs },
                        { "cache_hit", m->report.cacheHit }, { "cubin_bytes", m->cubin.size() }, { "key", m->key } };
                    j["reasons"] = Json::array();
                    for (const auto& r : reasons)
                        j["reasons"].push_back(toJson(r));
                    for (const auto& k : m->report.kernels)
                        j["kernels"].push_back({ { "kernel", k.kernel }, { "registers", k.registers },
                            { "spill_stores", k.spillStores }, { "spill_loads", k.spillLoads },
                            { "static_shared", k.staticSharedBytes }, { "local", k.localBytes } });
                    std::cout << j.dump(2) << "\n";
                } else {
                    std::cout << (m->report.ok ? "compiled" : "compile failed") << " for " << o.arch << " in "
                              << m->report.compileMs << " ms" << (m->report.cacheHit ? " (cache)" : "") << "\n";
                    for (const auto& k : m->report.kernels)
                        std::cout << "  " << k.kernel << ": " << k.registers << " registers, " << k.spillStores
                                  << " B spill stores, " << k.staticSharedBytes << " B static smem, " << k.localBytes
                                  << " B stack\n";
                    if (!m->report.ok)
                        std::cout << m->report.log << "\n";
                    for (const auto& r : reasons)
                        std::cout << "  " << (r.blocking ? "reject " : "review ") << r.rule << ": " << r.message
                                  << "\n";
                }
                return m->report.ok && !rejected ? kExitOk : kExitFailure;
            }
            try {
                const DeviceInfo& d = ev.device();
                if (!a.has("json"))
                    std::cout << "device: " << d.name << " (" << d.arch << "), driver " << d.driverVersion << "\n";
            } catch (const std::exception& ex) {
                std::cerr << "kloop eval: no usable CUDA GPU: " << ex.what()
                          << "\n(--compile-only --arch sm_90a compiles without one; KL_WORKER points at a kloop-worker "
                             "elsewhere)\n";
                return kExitFailure;
            }
            if (auto why = refusalBeforeCompile(problem, c, ev.device())) {
                std::cerr << "kloop eval: " << *why << " (nothing compiled)\n";
                return kExitFailure;
            }
            if (auto dir = a.option("session")) {
                // Judged against the session's current best, as the loop would (physics.suspicious-jump,
                // physics.single-shape-speedup).
                if (!std::filesystem::exists(std::filesystem::path(*dir) / "session.json"))
                    throw InputError("--session " + *dir + ": no session.json there");
                opt.best = currentBestOf(SessionStore::load(*dir));
            }
            const Evaluation e = ev.evaluate(c, opt, CancelToken {});
            if (a.has("json")) {
                std::cout << toJson(e).dump(2) << "\n";
            } else {
                std::cout << "verdict: " << verdictName(e.verdict) << "\n";
                for (const auto& r : e.reasons)
                    std::cout << "  " << (r.blocking ? "reject " : "review ") << r.rule << ": " << r.message << "\n";
                std::printf("%-28s %-8s %-8s %10s %10s %12s %8s\n", "shape", "held-out", "correct", "max relL2",
                    "median us", "baseline us", "speedup");
                for (const auto& s : e.shapes) {
                    double worst = 0;
                    for (const auto& ch : s.checks)
                        worst = std::max(worst, ch.relL2);
                    std::printf("%-28s %-8s %-8s %10.2e %10.2f %12.2f %8.3f\n", s.shape.label().c_str(),
                        s.heldOut ? "yes" : "", s.correct ? "yes" : "NO", worst, s.timing ? s.timing->medianUs : 0.0,
                        s.baselineTiming ? s.baselineTiming->medianUs : 0.0, s.speedup);
                }
                if (e.objective > 0)
                    std::printf("objective (weighted geomean speedup): %.3f [%.3f, %.3f]\n", e.objective,
                        e.objectiveCiLow, e.objectiveCiHigh);
            }
            return e.verdict == Verdict::Correct || e.verdict == Verdict::Accepted ? kExitOk : kExitFailure;
        } catch (const InputError& e) {
            std::cerr << "kloop eval: " << e.what() << "\n";
            return kExitFailure;
        } catch (const std::exception& e) {
            std::cerr << "kloop eval: " << e.what() << "\n";
            return kExitFailure;
        }
#else
        (void)a;
        std::cerr << "kloop eval: this build has no CUDA support (the CUDA toolkit was not found at configure time)\n";
        return kExitFailure;
#endif
    }

    CommandRegistration reg { { "eval", "compile, verify and time one candidate with the GPU harness",
        "kloop eval <problem> [candidate.cu] [--params K=V,...] [--seconds S] [--held-out N] "
        "[--seed N] [--session DIR] [--language cuda|triton] [--graph-mode auto|always|never] [--json]\n"
        "  The candidate's language: --language, else its extension (.py Triton, .cu CUDA); a file whose source is\n"
        "  the other language is refused, naming the file. Without a candidate, --language triton takes the\n"
        "  problem's Triton template.\n"
        "  --session DIR: judge the result against that session's current best (suspicious jumps, one-shape "
        "wins).\n"
        "  Without candidate.cu the problem's portable template (problem.json \"template\", not an arch template)\n"
        "  is evaluated with --params (defaults for the rest); name an arch template's file to evaluate it.\n"
        "  --graph-mode: time every shape as CUDA graph replays (always, as decode runs in serving), as\n"
        "  back-to-back launches (never), or graphs only under 20 us (auto, the default).\n"
        "  --compile-only --arch sm_90a: NVRTC to CUBIN without a GPU; prints registers, spills and the "
        "referee's source and PTX reasons (exit 1 on a rejecting one).\n"
        "  A device (or --arch) older than the problem's min_arch, or a configuration its architecture\n"
        "  lacks (a constraint naming ARCH), is refused before compiling.\n"
        "  Exit 0 when the verdict is correct, 1 otherwise.",
        { "json", "compile-only" },
        { "arch", "params", "seconds", "held-out", "seed", "session", "language", "graph-mode" }, &runEval } };

} // namespace
} // namespace kl::cli
