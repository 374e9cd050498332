// kloop profile --sol: the baseline and a candidate of a problem, traced and under CUPTI's range profiler in the
// GPU worker (never while timing), as a speed-of-light table, a bottleneck class and a .kltrace with one row per
// plan. `kloop profile` (cmd_profile.cpp) hands --sol over to the "profile sol" command registered here, so the
// profiler-only kloop used by the profiler's tests links without the worker.
#include "cli/command.h"
#include "core/catalogue.h"
#include "core/demangle.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_store.h"
#include "kl_build_features.h"
#include "profiler/analysis.h"
#include "profiler/kltrace_writer.h"

#if KL_FEATURE_CUDA
#include "kernels/gpu_evaluator.h"
#include "kernels/gpu_profiler.h"
#include "kernels/plan_profile.h"
#include "kernels/worker_protocol.h"
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

namespace fs = std::filesystem;

namespace kl::cli {
namespace {

    const char* kUsage
        = "usage: kloop profile --sol --problem P (--candidate FILE.cu [--params K=V,...] | --session DIR "
          "[--node ID]) [--shape T=..,H=..] [--launches N] [--no-counters] [--out FILE.kltrace] [--json]\n";

    std::map<std::string, std::int64_t> parseAssignments(const std::string& text, const char* option)
    {
        std::map<std::string, std::int64_t> out;
        std::stringstream ss(text);
        std::string item;
        while (std::getline(ss, item, ',')) {
            if (item.empty())
                continue;
            const auto eq = item.find('=');
            if (eq == std::string::npos || eq == 0)
                throw UsageError(
                    std::string("--") + option + " expects NAME=VALUE[,NAME=VALUE...], got '" + item + "'");
            const std::string value = item.substr(eq + 1);
            std::size_t used = 0;
            std::int64_t v = 0;
            try {
                v = std::stoll(value, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used == 0 || used != value.size())
                throw UsageError(std::string("--") + option + ": '" + value + "' is not an integer");
            out[item.substr(0, eq)] = v;
        }
        if (out.empty())
            throw UsageError(std::string("--") + option + " is empty");
        return out;
    }

    // What the command line asks for, checked before anything touches a GPU.
    struct SolArgs {
        std::optional<std::string> problem;
        std::optional<std::string> candidateFile;
        std::optional<std::string> session;
        std::optional<std::string> node;
        std::map<std::string, std::int64_t> params;
        std::map<std::string, std::int64_t> shape;
        int launches = 5;
        bool counters = true;
        std::string out = "kloop-profile-sol.kltrace";
        bool json = false;
    };

    SolArgs parseSolArgs(const Args& a)
    {
        if (!a.rest().empty())
            throw UsageError("--sol profiles a problem's plans in the worker; it takes no '-- <command>'");
        if (!a.positionals().empty())
            throw UsageError("unexpected argument '" + a.positionals()[0] + "'");
        SolArgs s;
        s.problem = a.option("problem");
        s.candidateFile = a.option("candidate");
        s.session = a.option("session");
        s.node = a.option("node");
        for (const char* opt : { "problem", "candidate", "session", "node", "params", "shape", "out", "launches" })
            if (auto v = a.option(opt); v && v->empty())
                throw UsageError(std::string("--") + opt + " needs a value");
        if (s.candidateFile.has_value() == s.session.has_value())
            throw UsageError("give exactly one of --candidate FILE.cu and --session DIR");
        if (s.node && !s.session)
            throw UsageError("--node selects a candidate of --session");
        if (a.has("params") && !s.candidateFile)
            throw UsageError("--params goes with --candidate (a session's candidates carry their parameters)");
        if (!s.problem && !s.session)
            throw UsageError("--problem is required with --candidate");
        if (auto p = a.option("params"))
            s.params = parseAssignments(*p, "params");
        if (auto sh = a.option("shape"))
            s.shape = parseAssignments(*sh, "shape");
        if (auto l = a.option("launches")) {
            const auto v = parseAssignments("n=" + *l, "launches").at("n");
            if (v < 1 || v > 1000)
                throw UsageError("--launches must be within 1..1000");
            s.launches = static_cast<int>(v);
        }
        s.counters = !a.has("no-counters");
        s.out = a.optionOr("out", s.out);
        s.json = a.has("json");
        return s;
    }

#if KL_FEATURE_CUDA
    // --node, else the correct candidate with the best objective, else the tree's head.
    Candidate sessionCandidate(const Session& s, const std::optional<std::string>& node)
    {
        if (node) {
            if (!s.tree.contains(*node))
                throw InputError("session " + s.id + " has no candidate '" + *node + "'");
            return s.tree.at(*node);
        }
        const auto best = s.tree.best([&](const Candidate& c) -> std::optional<double> {
            const auto it = s.evaluations.find(c.id);
            if (it == s.evaluations.end() || it->second.objective <= 0)
                return std::nullopt;
            if (it->second.verdict != Verdict::Accepted && it->second.verdict != Verdict::Correct)
                return std::nullopt;
            return it->second.objective;
        });
        if (best)
            return s.tree.at(*best);
        if (!s.tree.head().empty())
            return s.tree.at(s.tree.head());
        if (s.tree.empty())
            throw InputError("session " + s.id + " has no candidates");
        return s.tree.at(s.tree.order().back());
    }

    Shape chooseShape(const Problem& p, const SolArgs& s)
    {
        Shape shape;
        if (!s.shape.empty()) {
            shape.dims = s.shape;
            return p.withConstants(std::move(shape)); // a problem's fixed dims (mla_decode's DK) are not typed
        }
        if (p.tuningShapes.empty())
            throw InputError("problem " + p.name + " has no tuning shapes; give --shape");
        return largestTuningShape(p);
    }

    struct KernelRow {
        std::string name;
        double durationUs = -1; // traced median when traced, else the counters' (replayed) duration
        const SolCounters* sol = nullptr;
        std::string bound = "unknown";
    };

    std::vector<KernelRow> kernelRows(const PlanProfile& p)
    {
        std::vector<KernelRow> rows;
        for (const auto& k : kernelsOfOneRun(p))
            rows.push_back({ k.name, k.durationUs, k.sol,
                k.sol ? prof::rooflineClass(k.sol->dramThroughputPct, k.sol->smThroughputPct) : "unknown" });
        if (rows.empty() && !p.eventUs.empty()) // no kernel records and no counters: the whole run, CUDA events
            rows.push_back({ "(one run, CUDA events)", oneRunUs(p, {}), nullptr, "unknown" });
        return rows;
    }

    // The plan's class is its longest kernel's.
    const KernelRow* dominant(const std::vector<KernelRow>& rows)
    {
        const KernelRow* best = nullptr;
        for (const auto& r : rows)
            if (!best || r.durationUs > best->durationUs)
                best = &r;
        return best;
    }

    double planUs(const std::vector<KernelRow>& rows)
    {
        double t = 0;
        for (const auto& r : rows)
            t += std::max(r.durationUs, 0.0);
        return t;
    }

    std::string advice(const KernelRow& r)
    {
        if (!r.sol)
            return "no counters";
        return boundAdvice(r.bound, r.sol->dramThroughputPct, r.sol->smThroughputPct, r.sol->achievedOccupancyPct);
    }

    std::string writeTrace(
        const ProfileReport& r, const DeviceInfo& dev, const std::string& problem, const std::string& path)
    {
        prof::KlTraceWriter w(
            0, "kloop profile --sol " + problem + " " + r.shape.label() + " (each plan's first kernel aligned to t=0)");
        w.device(prof::Device { dev, 0 });
        for (std::size_t pi = 0; pi < r.plans.size(); ++pi) {
            const PlanProfile& p = r.plans[pi];
            const std::int64_t row = static_cast<std::int64_t>(pi) + 1;
            w.rowName(0, row, p.role);
            std::uint64_t t0 = UINT64_MAX;
            for (const auto& k : p.records)
                t0 = std::min(t0, k.startNs);
            for (const auto& k : p.records) {
                KernelRecord line = k;
                line.startNs = k.startNs - t0;
                line.endNs = k.endNs - t0;
                line.stream = static_cast<std::uint32_t>(row);
                line.name = demangle(k.name);
                w.kernel(line, 0);
            }
            // Counters belong to the first traced run's kernels (same launch order); untraced they stand alone.
            if (!p.records.empty())
                for (std::size_t i = 0; i < p.sol.size(); ++i) {
                    prof::SolMetrics m(p.sol[i]);
                    m.name = demangle(m.name);
                    w.sol(m, 0, row, static_cast<std::uint32_t>(i));
                }
            if (!p.solAvailable)
                w.warning(p.role + ": no speed-of-light counters: " + p.solNote);
        }
        if (!r.traceAvailable)
            w.warning("no kernel records: " + r.traceNote);
        const fs::path out = fs::absolute(path);
        writeFileAtomic(out, w.text());
        return out.string();
    }

    std::string pct(double v)
    {
        if (v < 0)
            return "-";
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", v);
        return buf;
    }

    int runSol(const SolArgs& s)
    {
        std::optional<Session> session;
        Candidate candidate;
        if (s.session) {
            LoadReport lr;
            session = SessionStore::load(*s.session, &lr);
            for (const auto& w : lr.warnings)
                std::cerr << "warning: " << w << "\n";
        }
        const Problem problem = loadProblem(
            (session ? findSessionProblemFolder(*session, s.problem, *s.session) : findProblemFolder(*s.problem))
                .string());
        Shape shape = chooseShape(problem, s);
        if (std::string why; !problem.shapeIsValid(shape, &why))
            throw InputError("--shape " + shape.label() + " does not fit problem " + problem.name + ": " + why);

        GpuEvaluatorOptions o;
        if (const char* w = std::getenv("KL_WORKER"); w && *w)
            o.worker.command = { w };
        GpuEvaluator ev(problem, o);
        if (session) {
            candidate = sessionCandidate(*session, s.node);
        } else {
            std::ifstream in(*s.candidateFile);
            if (!in)
                throw InputError(*s.candidateFile + ": cannot read");
            std::ostringstream text;
            text << in.rdbuf();
            candidate.id = fs::path(*s.candidateFile).stem().string();
            candidate.source = text.str();
            candidate.params = s.params;
            candidate.author = Author::Human;
        }
        DeviceInfo dev;
        try {
            dev = ev.device();
        } catch (const std::exception& e) {
            std::cerr << "kloop profile --sol: no usable CUDA GPU: " << e.what()
                      << "\n(the worker owns the GPU; KL_WORKER points at a kloop-worker, e.g. \"ssh gpu-host "
                         "kloop-worker\")\n";
            return kExitFailure;
        }
        ProfileRequest req;
        req.sol = s.counters;
        req.launches = s.launches;
        const ProfileReport r = profileAgainstBaseline(ev, candidate, shape, req);
        if (!r.compile.ok) {
            std::cerr << "kloop profile --sol: candidate " << candidate.id << " does not compile:\n"
                      << r.compile.log << "\n";
            return kExitFailure;
        }
        const std::string tracePath = writeTrace(r, dev, problem.name, s.out);

        struct PlanRows {
            const PlanProfile* plan;
            std::vector<KernelRow> rows;
        };
        std::vector<PlanRows> plans;
        for (const auto& p : r.plans)
            plans.push_back({ &p, kernelRows(p) });
        const PlanProfile* base = r.plan("baseline");
        const PlanProfile* cand = r.plan("candidate");
        double baseUs = 0, candUs = 0;
        for (const auto& pr : plans)
            (pr.plan == base ? baseUs : candUs) = planUs(pr.rows);

        if (s.json) {
            Json j;
            j["problem"] = problem.name;
            j["candidate"] = candidate.id;
            j["shape"] = toJson(shape);
            j["device"] = dev.name;
            j["trace_file"] = tracePath;
            j["plans"] = Json::array();
            for (const auto& pr : plans) {
                Json pj = { { "role", pr.plan->role }, { "label", pr.plan->label }, { "gpu_us", planUs(pr.rows) },
                    { "counters", pr.plan->solAvailable }, { "counters_note", pr.plan->solNote },
                    { "passes", pr.plan->solPasses }, { "kernels", Json::array() } };
                for (const auto& k : pr.rows) {
                    Json kj = { { "name", k.name }, { "duration_us", k.durationUs }, { "bound", k.bound } };
                    if (k.sol) {
                        kj["dram_throughput_pct"] = k.sol->dramThroughputPct;
                        kj["sm_throughput_pct"] = k.sol->smThroughputPct;
                        kj["achieved_occupancy_pct"] = k.sol->achievedOccupancyPct;
                        kj["dram_bytes"] = k.sol->dramBytes;
                    }
                    pj["kernels"].push_back(kj);
                }
                const KernelRow* dom = dominant(pr.rows);
                pj["bound"] = dom ? dom->bound : "unknown";
                pj["advice"] = dom ? advice(*dom) : "";
                j["plans"].push_back(pj);
            }
            j["speedup"] = candUs > 0 && baseUs > 0 ? baseUs / candUs : 0.0;
            j["trace_available"] = r.traceAvailable;
            j["trace_note"] = r.traceNote;
            j["report"] = wire::toJson(r);
            std::cout << j.dump(2) << "\n";
            return kExitOk;
        }

        std::printf("%s, shape %s on %s; baseline: %s\n", problem.name.c_str(), shape.label().c_str(), dev.name.c_str(),
            base ? base->label.c_str() : "?");
        std::printf(
            "%-10s %-36s %11s %7s %7s %10s  %s\n", "plan", "kernel", "time us", "DRAM %", "SM %", "occupancy", "class");
        for (const auto& pr : plans)
            for (const auto& k : pr.rows) {
                std::string name = k.name.size() > 36 ? k.name.substr(0, 33) + "..." : k.name;
                std::printf("%-10s %-36s %11.2f %7s %7s %10s  %s\n", pr.plan->role.c_str(), name.c_str(), k.durationUs,
                    pct(k.sol ? k.sol->dramThroughputPct : -1).c_str(),
                    pct(k.sol ? k.sol->smThroughputPct : -1).c_str(),
                    pct(k.sol ? k.sol->achievedOccupancyPct : -1).c_str(), k.bound.c_str());
            }
        if (baseUs > 0 && candUs > 0)
            std::printf("candidate vs baseline: %.3fx (GPU time of one run, %s)\n", baseUs / candUs,
                r.traceAvailable                 ? "median kernel time of the traced runs"
                    : cand && !cand->sol.empty() ? "the counter replay's kernel time"
                                                 : "median CUDA-event time of the runs");
        for (const auto& pr : plans) {
            if (!pr.plan->solAvailable)
                std::printf("%s: counters unavailable: %s\n", pr.plan->role.c_str(), pr.plan->solNote.c_str());
            else if (!pr.plan->solNote.empty())
                std::printf("%s: counters note: %s\n", pr.plan->role.c_str(), pr.plan->solNote.c_str());
        }
        if (!r.traceAvailable)
            std::printf("trace: %s\n", r.traceNote.c_str());
        if (cand) {
            const auto& rows = plans.back().rows;
            if (const KernelRow* dom = dominant(rows))
                std::printf("bottleneck (candidate): %s: %s\n", dom->bound.c_str(), advice(*dom).c_str());
        }
        std::cerr << "kloop profile --sol: wrote " << tracePath << " (rows \"baseline\" and \"candidate\")\n";
        return kExitOk;
    }
#endif

    int runProfileSol(const Args& a)
    {
        SolArgs s;
        try {
            s = parseSolArgs(a);
        } catch (const UsageError& e) {
            std::cerr << "kloop profile --sol: " << e.what() << "\n" << kUsage;
            return kExitUsage;
        }
#if KL_FEATURE_CUDA
        try {
            return runSol(s);
        } catch (const InputError& e) {
            std::cerr << "kloop profile --sol: " << e.what() << "\n";
            return kExitFailure;
        } catch (const std::exception& e) {
            std::cerr << "kloop profile --sol: " << e.what() << "\n";
            return kExitFailure;
        }
#else
        std::cerr << "kloop profile --sol: this build has no CUDA support (the CUDA toolkit was not found at configure "
                     "time), so it has no GPU worker\n";
        return kExitFailure;
#endif
    }

    const CommandRegistration reg { { "profile sol",
        "baseline vs candidate speed-of-light counters and timelines (same as kloop profile --sol)",
        std::string(kUsage)
            + "\nIn the GPU worker, never while timing: traces N runs (--launches, default 5) of the problem's "
              "baseline\n"
              "and of the candidate on one shape (default: the largest tuning shape), then replays one run of each\n"
              "under CUPTI's range profiler (DRAM and SM throughput in % of peak, achieved occupancy). Prints the\n"
              "table and the candidate's bottleneck class, and writes a .kltrace (default kloop-profile-sol.kltrace)\n"
              "with the rows \"baseline\" and \"candidate\", each plan's first kernel at t=0, for the timeline.\n"
              "Where counters are not available (no permission: ERR_NVGPUCTRPERM; worker built without CUPTI;\n"
              "KL_NO_CUPTI) it says why and still writes the trace. --session DIR takes the candidate --node ID,\n"
              "default the correct one with the best objective. KL_WORKER runs the worker elsewhere.",
        { "sol", "json", "quiet", "no-counters" },
        { "out", "problem", "candidate", "session", "node", "params", "shape", "launches" }, &runProfileSol } };

} // namespace
} // namespace kl::cli
