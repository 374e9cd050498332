// kloop trace analyze | export | info: import any supported trace and analyze or convert it.
#include "cli/command.h"
#include "core/catalogue.h"
#include "core/current_best.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_store.h"
#include "profiler/analysis.h"
#include "profiler/chrome_export.h"
#include "profiler/importers.h"
#include "profiler/workload.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace kl::cli {
namespace {

    // Import progress on stderr: redrawn in place on a terminal; in a file or pipe one plain line per tenth, so a CI
    // log gets no carriage returns.
    prof::Trace load(const std::string& path, bool quiet)
    {
        if (std::filesystem::is_directory(path))
            throw InputError(path + " is a directory, not a trace file");
        prof::ImportOptions opts;
        const bool tty = ::isatty(STDERR_FILENO) != 0;
        int lastTenth = -1;
        if (!quiet)
            opts.progress = [tty, &lastTenth](double f, const std::string& what) {
                if (tty) {
                    std::fprintf(stderr, "\r%5.1f%% %s", f * 100, what.c_str());
                } else {
                    const int tenth = static_cast<int>(f * 10);
                    if (tenth == lastTenth)
                        return;
                    lastTenth = tenth;
                    std::fprintf(stderr, "%5.1f%% %s\n", f * 100, what.c_str());
                }
                std::fflush(stderr);
            };
        prof::Trace t = prof::importTraceFile(path, opts);
        if (!quiet && tty)
            std::fprintf(stderr, "\r%*s\r", 60, "");
        return t;
    }

    // --work "name:flops:bytes[:tc]" (repeatable by commas) gives the analytic work of a kernel per launch.
    std::vector<prof::KernelWork> parseWork(const std::string& spec)
    {
        std::vector<prof::KernelWork> out;
        std::stringstream all(spec);
        std::string item;
        while (std::getline(all, item, ',')) {
            std::stringstream ss(item);
            std::string name, flops, bytes, tc;
            if (!std::getline(ss, name, ':') || !std::getline(ss, flops, ':') || !std::getline(ss, bytes, ':'))
                throw InputError("--work: expected name:flops:bytes[:tc], got '" + item + "'");
            std::getline(ss, tc, ':');
            prof::KernelWork w;
            w.nameContains = name;
            try {
                w.flops = std::stod(flops);
                w.bytes = std::stod(bytes);
            } catch (const std::exception&) {
                throw InputError("--work: flops and bytes must be numbers in '" + item + "'");
            }
            w.tensorCores = tc == "tc";
            out.push_back(w);
        }
        return out;
    }

    // The session's best candidate's measured speedups applied to the trace's time at each shape.
    prof::Projection projectSession(const prof::Workload& w, const std::string& dir)
    {
        const Session s = SessionStore::load(dir);
        const auto best = bestAcceptedId(s);
        if (!best)
            throw InputError(dir + ": the session has no accepted candidate to project");
        if (!w.tunableFor(s.problemName))
            throw InputError(dir + ": no operation of the trace fits the session's problem " + s.problemName);
        return prof::projectGain(w, s.problemName, *best, s.evaluations.at(*best).shapes);
    }

    int runAnalyze(const Args& a)
    {
        if (a.positionals().size() != 1) {
            std::cerr
                << "usage: kloop trace analyze FILE [--json] [--work name:flops:bytes[:tc],...] [--session DIR]\n";
            return kExitUsage;
        }
        try {
            prof::Trace t = load(a.positionals()[0], a.has("json"));
            prof::AnalysisOptions opts;
            if (auto w = a.option("work"))
                opts.work = parseWork(*w);
            if (a.optionOr("ceilings", "") == "h200")
                opts.ceilings = prof::Ceilings::h200();
            prof::Analysis an = prof::analyze(t, opts);
            prof::WorkloadOptions wopts;
            wopts.ceilings = opts.ceilings;
            const prof::Workload workload = prof::analyzeWorkload(t, loadCatalogue(), wopts);
            std::optional<prof::Projection> projection;
            if (auto dir = a.option("session"))
                projection = projectSession(workload, *dir);
            if (a.has("json")) {
                Json j = prof::toJson(an);
                j["workload"] = prof::toJson(workload);
                if (projection)
                    j["projection"] = prof::toJson(*projection);
                std::cout << j.dump(2) << "\n";
            } else {
                std::cout << prof::toText(an) << prof::toText(workload);
                if (projection)
                    std::cout << prof::toText(*projection);
            }
            return kExitOk;
        } catch (const InputError& e) {
            std::cerr << "kloop trace analyze: " << e.what() << "\n";
            return kExitFailure;
        }
    }

    int runExport(const Args& a)
    {
        auto out = a.option("out");
        if (a.positionals().size() != 1 || !out || out->empty()) {
            std::cerr << "usage: kloop trace export FILE --out TRACE.json\n";
            return kExitUsage;
        }
        try {
            prof::Trace t = load(a.positionals()[0], false);
            prof::exportChromeJsonFile(t, *out);
            std::cerr << "wrote " << *out << " (" << t.eventCount() << " events; open it in https://ui.perfetto.dev)\n";
            return kExitOk;
        } catch (const std::exception& e) {
            std::cerr << "kloop trace export: " << e.what() << "\n";
            return kExitFailure;
        }
    }

    int runInfo(const Args& a)
    {
        if (a.positionals().size() != 1) {
            std::cerr << "usage: kloop trace info FILE [--json]\n";
            return kExitUsage;
        }
        try {
            prof::Trace t = load(a.positionals()[0], a.has("json"));
            size_t counts[11] = {};
            for (const auto& e : t.events())
                ++counts[static_cast<size_t>(e.kind)];
            if (a.has("json")) {
                nlohmann::json j;
                j["source"] = t.meta().source;
                j["events"] = t.eventCount();
                j["rows"] = t.rows().size();
                j["links"] = t.linkCount();
                j["duration_ns"] = t.endNs();
                for (size_t k = 0; k < 11; ++k)
                    j["by_kind"][prof::toString(static_cast<prof::EventKind>(k))] = counts[k];
                j["warnings"] = t.meta().warnings;
                std::cout << j.dump(2) << "\n";
            } else {
                std::cout << t.meta().source << ": " << t.eventCount() << " events on " << t.rows().size() << " rows, "
                          << t.linkCount() << " launch->GPU links, " << prof::formatNs(static_cast<double>(t.endNs()))
                          << "\n";
                for (size_t k = 0; k < 11; ++k)
                    if (counts[k])
                        std::cout << "  " << prof::toString(static_cast<prof::EventKind>(k)) << ": " << counts[k]
                                  << "\n";
                for (const auto& w : t.meta().warnings)
                    std::cout << "warning: " << w << "\n";
            }
            return kExitOk;
        } catch (const InputError& e) {
            std::cerr << "kloop trace info: " << e.what() << "\n";
            return kExitFailure;
        }
    }

    const CommandRegistration regAnalyze { { "trace analyze",
        "bottleneck analysis of a trace (Chrome/PyTorch JSON, nsys SQLite, .kltrace)",
        "kloop trace analyze FILE [--json] [--work name:flops:bytes[:tc],...] [--ceilings h200] [--session DIR]\n\n"
        "Imports the trace (format detected from its content; gzip is fine) and prints the bottleneck summary:\n"
        "per-kernel statistics, GPU busy/idle with the idle time attributed to host work, launch calls,\n"
        "synchronization or queueing, launch-overhead phases, and a roofline class per kernel where speed-of-light\n"
        "counters (kloop profile captures) or --work (FLOPs and bytes per launch of kernels whose name contains\n"
        "`name`; `tc` = tensor cores) are known. Then the operations: GPU time by the op that launched it, the\n"
        "catalogue problems that fit (problem.json \"trace_match\") with their shapes, calls and time share, and\n"
        "the phases classed by their content. --session DIR projects the saving of that session's best candidate\n"
        "(Amdahl, per shape, from its measured speedups). --json prints the structured form.",
        { "json" }, { "work", "ceilings", "session" }, &runAnalyze } };
    const CommandRegistration regExport { { "trace export", "convert a trace to Chrome trace JSON (opens in Perfetto)",
        "kloop trace export FILE --out TRACE.json\n\nWrites Chrome trace JSON with PyTorch-profiler categories and "
        "ac2g "
        "launch->kernel flows; open it in https://ui.perfetto.dev or chrome://tracing.",
        {}, { "out" }, &runExport } };
    const CommandRegistration regInfo { { "trace info", "event counts and rows of a trace",
        "kloop trace info FILE [--json]", { "json" }, {}, &runInfo } };

} // namespace
} // namespace kl::cli
