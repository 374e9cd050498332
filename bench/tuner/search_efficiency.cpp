// Search efficiency: how many evaluations each strategy needs to come within a tolerance (3%) of the best
// configuration of a recorded exhaustive sweep, median over seeds, against random search. The costs are the
// tuning database's recorded measurements, so the replay uses no GPU.
//
//   kl_bench_tuner_search --db FILE [--problem NAME] [--seeds 10] [--tolerance 0.03] [--out FILE.md]
//   kl_bench_tuner_search --synthetic-sweep FILE   records an exhaustive sweep of the synthetic test problem
//                                                   (tests' deterministic evaluator, no GPU) into FILE
#include "agent/tuner/search_space.h"
#include "agent/tuner/strategy.h"
#include "agent/tuner/tuner_agent.h"
#include "agent/tuning_db/tuning_database.h"
#include "core/errors.h"
#include "core/research_loop.h"
#include "tests/core/synthetic_evaluator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>

using namespace kl;

namespace {

// A larger space than the unit tests use: 6 x 4 x 4 x 4 x 2 = 768 configurations.
const char* kSweepTemplate = R"(// @kl:param BLOCK = 128 in [32, 64, 128, 256, 512, 1024]
// @kl:param VEC = 1 in [1, 2, 4, 8]
// @kl:param UNROLL = 1 in [1, 2, 4, 8]
// @kl:param ROWS = 1 in [1, 2, 4, 8]
// @kl:param STAGES = 1 in [1, 2]
// @kl:constraint H % (VEC * 32) == 0
// @kl:launch synthetic_kernel grid=(ceil_div(T, ROWS)) block=(BLOCK) smem=0 args=(y, x, T, H)
extern "C" __global__ void synthetic_kernel(float* y, const float* x, int T, int H) {}
)";

int syntheticSweep(const std::string& file)
{
    testonly::SyntheticEvaluatorForTests ev;
    // STAGES interacts with UNROLL, so the landscape is not separable.
    ev.latencyUs = [&ev](const ParamValues& p, const Shape& s) {
        const double stages = static_cast<double>(testonly::SyntheticEvaluatorForTests::get(p, "STAGES"));
        const double unroll = static_cast<double>(testonly::SyntheticEvaluatorForTests::get(p, "UNROLL"));
        return ev.defaultLatency(p, s) * (stages == 2 && unroll >= 4 ? 0.93 : 1.0);
    };
    ev.registers = [](const ParamValues& p) {
        return static_cast<int>(16 * testonly::SyntheticEvaluatorForTests::get(p, "UNROLL")
            + 4 * testonly::SyntheticEvaluatorForTests::get(p, "VEC"));
    };
    const auto dir = std::filesystem::temp_directory_path() / ("kl-sweep-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    Session header;
    header.id = "synthetic-sweep";
    header.problemName = ev.problem().name;
    header.device = ev.device();
    header.settings.agent = "tuner:exhaustive";
    auto store = SessionStore::create(dir, header);
    Candidate root;
    root.source = kSweepTemplate;
    root.params = parseKernelSpec(kSweepTemplate).defaults();
    store->proposeCandidate(root);
    auto db = TuningDatabase::open(file);
    auto agent = makeTunerAgent("exhaustive");
    LoopOptions o;
    o.cache = db.get();
    ResearchLoop loop(*store, ev, *agent, o);
    const LoopResult r = loop.run();
    std::cerr << "synthetic sweep: " << r.reason << ", " << r.evaluatedThisRun << " evaluated, " << db->size()
              << " records in " << file << "\n";
    std::filesystem::remove_all(dir);
    return 0;
}

struct Replay {
    tuner::SearchSpace space;
    std::vector<double> cost;
    double best = 0;
    std::size_t valid = 0;
};

Replay loadReplay(const TuningDatabase& db, const std::string& problem)
{
    std::optional<TuningSpace> chosen;
    for (const TuningSpace& s : db.spaces())
        if ((problem.empty() || s.problem == problem) && (!chosen || s.records > chosen->records))
            chosen = s;
    if (!chosen)
        throw InputError("the tuning database has no recorded space" + (problem.empty() ? "" : " for " + problem));
    const auto records = db.recordsOf(chosen->shapesDigest);
    std::set<std::string> names;
    for (const auto& r : records)
        for (const auto& [k, v] : r.key.params)
            names.insert(k);
    std::vector<std::string> nameList(names.begin(), names.end());
    std::vector<std::vector<std::int64_t>> values(nameList.size());
    std::vector<ParamValues> configs;
    Replay rp;
    for (const auto& r : records) {
        configs.push_back(r.key.params);
        for (std::size_t d = 0; d < nameList.size(); ++d)
            values[d].push_back(r.key.params.count(nameList[d]) ? r.key.params.at(nameList[d]) : 0);
        rp.cost.push_back(recordCost(r.evaluation));
    }
    rp.space = tuner::SearchSpace::fromConfigs(nameList, values, configs);
    rp.best = std::numeric_limits<double>::infinity();
    for (double c : rp.cost)
        if (std::isfinite(c)) {
            rp.best = std::min(rp.best, c);
            ++rp.valid;
        }
    if (!std::isfinite(rp.best))
        throw InputError("no configuration of the recorded space succeeded");
    std::cerr << "space: problem " << chosen->problem << ", device " << chosen->device << ", " << records.size()
              << " recorded configurations (" << rp.valid << " valid), shapes";
    for (const Shape& s : chosen->shapes)
        std::cerr << " " << s.label();
    std::cerr << "\n";
    return rp;
}

std::size_t evaluationsToReach(const Replay& rp, const std::string& strategy, std::uint64_t seed, double tolerance)
{
    auto st = tuner::makeStrategy(strategy, rp.space, seed);
    std::size_t n = 0;
    while (!st->exhausted()) {
        const auto picks = st->next(1);
        if (picks.empty())
            break;
        for (std::size_t i : picks) {
            ++n;
            st->observe(i, rp.cost[i]);
            if (rp.cost[i] <= rp.best * (1 + tolerance))
                return n;
        }
    }
    return n;
}

double quantile(std::vector<std::size_t> v, double q)
{
    std::sort(v.begin(), v.end());
    const double pos = q * static_cast<double>(v.size() - 1);
    const std::size_t lo = static_cast<std::size_t>(pos);
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return static_cast<double>(v[lo]) + (pos - static_cast<double>(lo)) * static_cast<double>(v[hi] - v[lo]);
}

} // namespace

int main(int argc, char** argv)
{
    std::string dbFile, problem, outFile, sweepFile;
    int seeds = 10;
    double tolerance = 0.03;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::cerr << a << " needs a value\n";
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--db")
            dbFile = value();
        else if (a == "--problem")
            problem = value();
        else if (a == "--seeds")
            seeds = std::stoi(value());
        else if (a == "--tolerance")
            tolerance = std::stod(value());
        else if (a == "--out")
            outFile = value();
        else if (a == "--synthetic-sweep")
            sweepFile = value();
        else {
            std::cerr << "usage: kl_bench_tuner_search --db FILE [--problem NAME] [--seeds N] [--tolerance F] "
                         "[--out FILE.md]\n       kl_bench_tuner_search --synthetic-sweep FILE\n";
            return 2;
        }
    }
    try {
        if (!sweepFile.empty())
            return syntheticSweep(sweepFile);
        if (dbFile.empty()) {
            std::cerr << "kl_bench_tuner_search: --db FILE is required\n";
            return 2;
        }
        auto db = TuningDatabase::open(dbFile);
        const Replay rp = loadReplay(*db, problem);
        std::map<std::string, std::vector<std::size_t>> runs;
        for (const std::string& s : tuner::strategyNames())
            for (int seed = 1; seed <= seeds; ++seed)
                runs[s].push_back(evaluationsToReach(rp, s, static_cast<std::uint64_t>(seed), tolerance));
        const double randomMedian = quantile(runs["random"], 0.5);
        std::ostringstream md;
        char buf[256];
        std::snprintf(buf, sizeof buf,
            "Evaluations to come within %.0f%% of the exhaustive best (%zu recorded configurations, %zu "
            "valid), over %d seeds:\n\n",
            tolerance * 100, rp.space.size(), rp.valid, seeds);
        md << buf;
        md << "| strategy | median | p25 | p75 | worst | median vs random |\n|---|---|---|---|---|---|\n";
        for (const std::string& s : tuner::strategyNames()) {
            const auto& v = runs[s];
            std::snprintf(buf, sizeof buf, "| %s | %.1f | %.1f | %.1f | %zu | %.2fx fewer |\n", s.c_str(),
                quantile(v, 0.5), quantile(v, 0.25), quantile(v, 0.75), *std::max_element(v.begin(), v.end()),
                randomMedian / std::max(1.0, quantile(v, 0.5)));
            md << buf;
        }
        md << "\nexhaustive enumerates in declaration order (one order, every seed alike).\n";
        std::cout << md.str();
        if (!outFile.empty()) {
            std::ofstream out(outFile);
            out << md.str();
        }
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "kl_bench_tuner_search: " << e.what() << "\n";
        return 1;
    }
}
