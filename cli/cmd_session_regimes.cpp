// kloop session regimes: the shape regimes a session's measurements suggest, where its per-shape winners change.
#include "cli/command.h"
#include "core/catalogue.h"
#include "core/json_io.h"
#include "core/regime_split.h"
#include "core/session_store.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

namespace kl::cli {
namespace {

    std::string speedup(double x)
    {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.3fx", x);
        return buf;
    }

    std::string shapesText(const std::vector<Shape>& shapes)
    {
        std::string text;
        for (const Shape& s : shapes)
            text += (text.empty() ? "" : " ") + s.label();
        return text;
    }

    int runSessionRegimes(const Args& a)
    {
        if (a.positionals().size() != 1) {
            std::cerr << "usage: kloop session regimes SESSION [--max-regimes N] [--min-gain PCT] [--from-scratch] "
                         "[--problem NAME|DIR] [--write-problem DIR] [--json]\n";
            return kExitUsage;
        }
        RegimeSplitOptions o;
        o.maxRegimes = static_cast<int>(a.integer("max-regimes", o.maxRegimes, 1, 16));
        o.minGain = a.real("min-gain", o.minGain * 100, 0, 1000) / 100;
        o.refineProblemRegimes = !a.has("from-scratch");
        try {
            LoadReport report;
            const Session s = SessionStore::load(a.positionals()[0], &report);
            for (const auto& w : report.warnings)
                std::cerr << "warning: " << w << "\n";
            const std::filesystem::path folder = findSessionProblemFolder(s, a.option("problem"), a.positionals()[0]);
            const Problem problem = loadProblem(folder.string());
            const RegimeSplit split = learnRegimes(problem, s, o);
            const std::optional<std::string> writeTo = a.option("write-problem");
            if (writeTo)
                writeProblemWithRegimes(folder, *writeTo, split);
            if (a.has("json")) {
                Json regimes = Json::array();
                for (const LearnedRegime& r : split.regimes) {
                    Json shapes = Json::array();
                    for (const Shape& sh : r.shapes)
                        shapes.push_back(sh.label());
                    regimes.push_back({ { "name", r.name }, { "when", r.condition }, { "shapes", shapes },
                        { "best", r.best }, { "objective", r.objective }, { "single_objective", r.singleObjective } });
                }
                std::cout << Json {
                    { "gpu", split.gpu }, { "tuning_shapes", split.shapes }, { "configurations", split.configurations },
                    { "single_best", split.singleBest }, { "single_objective", split.singleObjective },
                    { "start_objective", split.startObjective }, { "objective", split.objective },
                    { "regimes", regimes }, { "cuts", split.cuts }, { "problem_json", Json::parse(regimesJson(split)) },
                    { "problem_written", writeTo ? Json(*writeTo) : Json() }
                }.dump(2) << "\n";
                return kExitOk;
            }
            std::cout << "session " << s.id << " (" << problem.name << "): " << split.configurations
                      << " configurations timed at its " << split.shapes << " tuning shapes on " << split.gpu << "\n"
                      << "one configuration everywhere: " << split.singleBest << " at "
                      << speedup(split.singleObjective) << " over the baseline\n";
            std::string written;
            if (writeTo)
                written = "wrote " + *writeTo + "/problem.json with these regimes: kloop run --problem " + *writeTo
                    + " tunes them\n";
            if (split.cuts == 0) {
                std::cout << "no split raises that by " << o.minGain * 100 << "% or more: "
                          << (split.regimes.size() == 1 ? "one regime serves the tuning shapes\n"
                                                        : "the problem's regimes stand\n")
                          << written;
                return kExitOk;
            }
            std::cout << "a best per regime: " << speedup(split.objective) << " ("
                      << speedup(split.objective / split.singleObjective) << " the single configuration";
            if (split.regimes.size() > static_cast<std::size_t>(split.cuts) + 1)
                std::cout << ", " << speedup(split.objective / split.startObjective) << " the problem's regimes";
            std::cout << ")\n";
            for (const LearnedRegime& r : split.regimes) {
                std::cout << "  " << r.name << " (" << r.condition << "): ";
                if (r.shapes.empty())
                    std::cout << "no tuning shape lies in it; an export's fallback serves it\n";
                else
                    std::cout << r.best << " " << speedup(r.objective) << " vs " << speedup(r.singleObjective) << " at "
                              << shapesText(r.shapes) << "\n";
            }
            std::cout << "problem.json \"regimes\": " << regimesJson(split) << "\n"
                      << "a session with these regimes verifies each winner on held-out shapes drawn inside it\n"
                      << written;
            return kExitOk;
        } catch (const std::exception& e) {
            std::cerr << "kloop session regimes: " << e.what() << "\n";
            return kExitFailure;
        }
    }

    const CommandRegistration reg { { "session regimes",
        "suggest shape regimes from where a session's per-shape winners change",
        "kloop session regimes SESSION [--max-regimes N] [--min-gain PCT] [--from-scratch] [--problem NAME|DIR]\n"
        "[--write-problem DIR] [--json]\n"
        "Takes the session's correct, fully timed configurations (screens and referee-flagged ones left out, on the\n"
        "GPU model that timed most of it) and splits the tuning shapes inside the problem's regimes (--from-scratch:\n"
        "the whole range) along one dim at a time, as a decision tree of thresholds, so that each part gets its own\n"
        "best configuration. A split is kept while it raises the weighted geometric-mean speedup by --min-gain "
        "percent\n"
        "(default 2), up to --max-regimes parts (default 4). Cuts lie midway between neighbouring tuning values\n"
        "(geometrically for log-uniform dims, on a power of two near it). Prints each regime's condition, winner and\n"
        "speedup against the single best, and the problem.json \"regimes\" array; a session of the problem with those\n"
        "regimes tunes and verifies each one on its own. --write-problem DIR copies the session's problem folder to "
        "DIR\n"
        "(new or empty) with those regimes in its problem.json, every other field as it was, for `kloop run --problem\n"
        "DIR`.",
        { "json", "from-scratch" }, { "max-regimes", "min-gain", "problem", "write-problem" }, &runSessionRegimes } };

} // namespace
} // namespace kl::cli
