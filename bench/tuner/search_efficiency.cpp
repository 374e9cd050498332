// Search efficiency, replayed from a recorded exhaustive sweep (the tuning database), so it uses no GPU:
//  1. evaluations each strategy needs to come within a tolerance (3%) of the sweep's best, median over seeds,
//     against random search;
//  2. device time to the same final best (a full-protocol evaluation within the tolerance), each strategy alone
//     against the same strategy under multi-fidelity search (agent/tuner/multi_fidelity.h). A full evaluation
//     costs its recorded device time (device_ms, else finished - started). A screen the database holds at the plan's
//     fidelity (a GPU screen sweep: kloop run --agent tuner:exhaustive:halving=5x1 into the same file) costs its
//     recorded device_ms and reports its recorded result. Otherwise it is priced: the full record's device time less
//     the recorded timing (samples x launches per sample x candidate and baseline medians, shape by shape) and less the
//     recorded verification of the shapes it does not time (verify_ms; a screen verifies only what it times),
//     plus what a screen times (its sample count on its shapes). A screen's result is the weighted geomean over its
//     shapes of the recorded speedups, each perturbed by the error of a median of that many samples (the recorded
//     p10-p90 spread), drawn from the seed.
//
//  3. whole sessions of --budget evaluations (screens included, as kloop run --budget counts them; multi-fidelity
//     sessions --halving-budget, default the same, to find the budget at which they end as well): their device time
//     alone and under multi-fidelity search, and how many ended with a full evaluation within the tolerance.
//
//   kl_bench_tuner_search --db FILE [--problem NAME] [--seeds 10] [--tolerance 0.03] [--out FILE.md]
//                         [--screen-samples 5] [--screen-shapes 1] [--eta F (default 0: balanced)] [--budget 60]
//                         [--endgame N (default: HalvingPlan's; the whole sessions' last N evaluations promote)]
//                         [--halving-budget N]
//   kl_bench_tuner_search --synthetic-sweep FILE [--landscape bowl|plateau|flat|rugged|ridge] [--with-screens]
//                         records an exhaustive sweep of the synthetic test problem (tests' deterministic
//                         evaluator, no GPU) into FILE; --with-screens adds a screen sweep at the plan's fidelity
#include "agent/tuner/multi_fidelity.h"
#include "agent/tuner/search_space.h"
#include "agent/tuner/strategy.h"
#include "agent/tuner/tuner_agent.h"
#include "agent/tuning_db/tuning_database.h"
#include "core/errors.h"
#include "core/loop_objective.h"
#include "core/research_loop.h"
#include "tests/core/synthetic_evaluator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
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

// bowl: one basin with a 4% ripple; plateau: the bowl flattened below a threshold, so many configurations lie
// within 3% of the best; flat: a wider plateau (a few percent of the space within 3%, like the H200 rmsnorm space:
// random search needs about 20 evaluations there); rugged: a 25% ripple, so neighbours say little; ridge: the
// time depends on products of parameters (elements per thread BLOCK x VEC, rows per block UNROLL x ROWS), so the good
// configurations lie on diagonals that one-parameter steps leave.
// screens: also a screen sweep at that fidelity into the same file (tuner:exhaustive:halving), as on the GPU.
int syntheticSweep(const std::string& file, const std::string& landscape, const std::optional<Fidelity>& screens)
{
    testonly::SyntheticEvaluatorForTests ev;
    if (landscape != "bowl" && landscape != "plateau" && landscape != "flat" && landscape != "rugged"
        && landscape != "ridge")
        throw InputError("--landscape: '" + landscape + "' is not bowl, plateau, flat, rugged or ridge");
    if (landscape == "rugged")
        ev.ripple = 0.25;
    const double plateauWidth = landscape == "flat" ? 1.8 : 1.35;
    // STAGES interacts with UNROLL, so the landscape is not separable.
    ev.latencyUs = [&ev, landscape, plateauWidth](const ParamValues& p, const Shape& s) {
        const double stages = static_cast<double>(testonly::SyntheticEvaluatorForTests::get(p, "STAGES"));
        const double unroll = static_cast<double>(testonly::SyntheticEvaluatorForTests::get(p, "UNROLL"));
        const double interaction = stages == 2 && unroll >= 4 ? 0.93 : 1.0;
        if (landscape == "ridge") {
            auto l2 = [&](const char* n) {
                return std::log2(static_cast<double>(testonly::SyntheticEvaluatorForTests::get(p, n)));
            };
            const double a = l2("BLOCK") + l2("VEC") - 10, b = l2("UNROLL") + l2("ROWS") - 2;
            const double work = ev.bowlUs({ { "BLOCK", 256 }, { "VEC", 4 }, { "UNROLL", 2 }, { "ROWS", 2 } }, s);
            return work * (1 + 0.12 * a * a + 0.08 * b * b) * (ev.defaultLatency(p, s) / ev.bowlUs(p, s)) * interaction;
        }
        if (landscape == "plateau" || landscape == "flat") {
            const double floor = ev.bowlUs({ { "BLOCK", 256 }, { "VEC", 4 }, { "UNROLL", 2 }, { "ROWS", 2 } }, s);
            const double excess = std::max(0.0, ev.bowlUs(p, s) / floor - plateauWidth);
            return floor * (1 + excess) * (ev.defaultLatency(p, s) / ev.bowlUs(p, s)) * interaction;
        }
        return ev.defaultLatency(p, s) * interaction;
    };
    ev.registers = [](const ParamValues& p) {
        return static_cast<int>(16 * testonly::SyntheticEvaluatorForTests::get(p, "UNROLL")
            + 4 * testonly::SyntheticEvaluatorForTests::get(p, "VEC"));
    };
    const auto dir = std::filesystem::temp_directory_path() / ("kl-sweep-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    Session header;
    header.id = "synthetic-sweep-" + landscape;
    header.problemName = ev.problem().name;
    header.device = ev.device();
    header.settings.agent = "tuner:exhaustive";
    Candidate root;
    root.source = kSweepTemplate;
    root.params = parseKernelSpec(kSweepTemplate).defaults();
    auto db = TuningDatabase::open(file);
    auto sweep = [&](const std::string& agentSpec, const std::filesystem::path& sessionDir) {
        auto store = SessionStore::create(sessionDir, header);
        store->proposeCandidate(root);
        auto agent = makeTunerAgent(agentSpec);
        LoopOptions o;
        o.cache = db.get();
        ResearchLoop loop(*store, ev, *agent, o);
        const LoopResult r = loop.run();
        std::cerr << "synthetic sweep (" << agentSpec << "): " << r.reason << ", " << r.evaluatedThisRun
                  << " evaluated, " << db->size() << " records in " << file << "\n";
    };
    sweep("exhaustive", dir / "full");
    if (screens)
        sweep("exhaustive:halving=" + std::to_string(screens->screenSamples) + "x"
                + std::to_string(screens->screenShapes),
            dir / "screens");
    std::filesystem::remove_all(dir);
    return 0;
}

struct Replay {
    tuner::SearchSpace space;
    std::vector<double> cost;
    std::vector<Evaluation> records; // parallel to the space's configurations
    std::vector<Shape> shapes; // the space's tuning shapes
    double best = 0;
    std::size_t valid = 0;
    bool deviceMsRecorded = true; // every record has device_ms (else finished - started stands in)
    bool verifyMsRecorded = true; // every verified shape has verify_ms (else screens are priced verifying them all)
    // Screens measured on the GPU at the plan's fidelity (kloop run --agent tuner:exhaustive:halving=SxN into the
    // same database), parallel to records: their device_ms and their result replace the priced estimate.
    std::vector<std::optional<Evaluation>> screens;
    std::size_t screensRecorded = 0;
};

Replay loadReplay(const TuningDatabase& db, const std::string& problem, const Fidelity& screen)
{
    std::optional<TuningSpace> chosen;
    for (const TuningSpace& s : db.spaces())
        if ((problem.empty() || s.problem == problem) && s.protocol.find("screen:") == std::string::npos
            && (!chosen || s.records > chosen->records))
            chosen = s;
    if (!chosen)
        throw InputError("the tuning database has no recorded space" + (problem.empty() ? "" : " for " + problem));
    std::vector<TuningRecord> records;
    std::set<ParamValues> seen;
    for (TuningRecord& r : db.recordsOf(chosen->shapesDigest))
        if (!r.evaluation.fidelity.screen() && seen.insert(r.key.params).second) // the sweep's full measurements
            records.push_back(std::move(r));
    std::set<std::string> names;
    for (const auto& r : records)
        for (const auto& [k, v] : r.key.params)
            names.insert(k);
    std::vector<std::string> nameList(names.begin(), names.end());
    std::vector<std::vector<std::int64_t>> values(nameList.size());
    std::vector<ParamValues> configs;
    Replay rp;
    rp.shapes = chosen->shapes;
    for (const auto& r : records) {
        configs.push_back(r.key.params);
        for (std::size_t d = 0; d < nameList.size(); ++d)
            values[d].push_back(r.key.params.count(nameList[d]) ? r.key.params.at(nameList[d]) : 0);
        rp.cost.push_back(recordCost(r.evaluation));
        rp.records.push_back(r.evaluation);
        if (!r.evaluation.shapes.empty()) // pruned or failed to compile: it never held the device
            rp.deviceMsRecorded = rp.deviceMsRecorded && r.evaluation.deviceMs > 0;
        for (const ShapeResult& s : r.evaluation.shapes)
            rp.verifyMsRecorded = rp.verifyMsRecorded && s.verifyMs > 0;
    }
    rp.screens.resize(records.size());
    const std::string screenProtocol = (chosen->protocol.empty() ? "" : chosen->protocol + " ") + screen.label();
    for (const TuningSpace& s : db.spaces()) {
        if (s.protocol != screenProtocol || s.problem != chosen->problem || s.sourceHash != chosen->sourceHash
            || s.device != chosen->device || s.shapes != chosen->shapes)
            continue;
        std::map<ParamValues, std::size_t> indexOf;
        for (std::size_t i = 0; i < configs.size(); ++i)
            indexOf[configs[i]] = i;
        for (TuningRecord& r : db.recordsOf(s.shapesDigest))
            if (auto it = indexOf.find(r.key.params); it != indexOf.end() && !rp.screens[it->second]) {
                rp.screens[it->second] = std::move(r.evaluation);
                ++rp.screensRecorded;
            }
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
    std::cerr << "; " << rp.screensRecorded << " measured screens (" << screenProtocol << ")\n";
    return rp;
}

// What a full evaluation of a record held the device for.
double fullMs(const Evaluation& e)
{
    return e.deviceMs > 0 ? e.deviceMs : static_cast<double>(std::max<std::int64_t>(0, e.finishedMs - e.startedMs));
}

// Device time of one timing sample of a shape: the launches of the candidate and of the interleaved baseline.
double sampleMs(const ShapeResult& s)
{
    double us = s.timing ? s.timing->launchesPerSample * s.timing->medianUs : 0;
    if (s.baselineTiming)
        us += s.baselineTiming->launchesPerSample * s.baselineTiming->medianUs;
    return us * 1e-3;
}

double screenMs(const Replay& rp, std::size_t i, const Fidelity& f)
{
    if (rp.screens[i])
        return fullMs(*rp.screens[i]);
    const Evaluation& e = rp.records[i];
    const std::vector<Shape> screened = screenTuningShapes(rp.shapes, f);
    double timing = 0, verifiedElsewhere = 0;
    for (const ShapeResult& s : e.shapes) {
        if (s.timing) {
            timing += s.timing->samples * sampleMs(s);
            if (s.graphTiming && s.graphTiming->samples > 0 && !s.timing->graphMode)
                timing += s.graphTiming->samples * s.graphTiming->launchesPerSample * s.graphTiming->medianUs * 1e-3;
        }
        if (std::find(screened.begin(), screened.end(), s.shape) == screened.end())
            verifiedElsewhere += s.verifyMs;
    }
    // What is left: the compile lookup, the screened shapes' verification, the worker's round trips.
    double ms = std::max(0.0, fullMs(e) - timing - verifiedElsewhere);
    for (const Shape& shape : screened)
        for (const ShapeResult& s : e.shapes)
            if (s.timing && !s.heldOut && s.shape == shape)
                ms += f.screenSamples * sampleMs(s);
    return ms;
}

// Relative error of the median of n samples from a distribution with the recorded p10-p90 spread.
double medianError(const std::optional<TimingStats>& t, int n)
{
    if (!t || !(t->medianUs > 0))
        return 0;
    const double sd = std::max(0.0, t->p90Us - t->p10Us) / (2 * 1.2816 * t->medianUs);
    return 1.2533 * sd / std::sqrt(static_cast<double>(std::max(1, n)));
}

// What a screen of a record reports: its weighted geomean speedup over the screen's shapes, each shape's speedup
// perturbed by the error of the candidate's and the baseline's medians of screenSamples samples.
double screenCost(const Replay& rp, std::size_t i, const Fidelity& f, std::mt19937_64& rng)
{
    if (rp.screens[i])
        return recordCost(*rp.screens[i]);
    if (!std::isfinite(rp.cost[i]))
        return rp.cost[i];
    Evaluation e = rp.records[i];
    const std::vector<Shape> timed = screenTuningShapes(rp.shapes, f);
    std::normal_distribution<double> z(0, 1);
    for (ShapeResult& s : e.shapes) {
        if (!s.timing)
            continue;
        if (std::find(timed.begin(), timed.end(), s.shape) == timed.end()) {
            s.timing.reset();
            continue;
        }
        const double a = medianError(s.timing, f.screenSamples), b = medianError(s.baselineTiming, f.screenSamples);
        s.speedup *= std::exp(std::sqrt(a * a + b * b) * z(rng));
        s.speedupCiLow = s.speedupCiHigh = s.speedup;
    }
    const auto v = computeObjective(e, "weighted-geomean-speedup");
    return v ? 1.0 / v->value : rp.cost[i];
}

struct Reach {
    std::size_t evaluations = 0; // every evaluation, screens included
    std::size_t full = 0;
    double deviceMs = 0;
    bool reached = false;
    double eta = 0; // multi-fidelity: the promotion ratio of the first rung when it ended
    bool screenedWithin = false; // multi-fidelity: a configuration within the tolerance was screened
};

// One walk per seed gives both figures: toBest is the walk up to its first full evaluation within the tolerance (its
// whole length when none comes), whole its first `budget` evaluations, screens included (a whole session; reached
// saying whether its best ended within the tolerance).
struct Walk {
    Reach toBest, whole;
    bool toBestDone = false, wholeDone = false;

    // After each evaluation: true once both figures are taken.
    bool record(const Reach& r, std::size_t budget)
    {
        if (!toBestDone && r.reached) {
            toBest = r;
            toBestDone = true;
        }
        if (!wholeDone && r.evaluations >= budget) {
            whole = r;
            wholeDone = true;
        }
        return toBestDone && wholeDone;
    }
    Walk& end(const Reach& r)
    {
        if (!toBestDone)
            toBest = r;
        if (!wholeDone)
            whole = r;
        return *this;
    }
};

Walk walkAlone(const Replay& rp, const std::string& strategy, std::uint64_t seed, double tolerance, std::size_t budget)
{
    auto st = tuner::makeStrategy(strategy, rp.space, seed);
    Reach r;
    Walk w;
    while (!st->exhausted()) {
        const auto picks = st->next(1);
        if (picks.empty())
            break;
        for (std::size_t i : picks) {
            ++r.evaluations;
            ++r.full;
            r.deviceMs += fullMs(rp.records[i]);
            st->observe(i, rp.cost[i]);
            r.reached = r.reached || rp.cost[i] <= rp.best * (1 + tolerance);
            if (w.record(r, budget))
                return w;
        }
    }
    return w.end(r);
}

// ToBest: the search is told no budget and walks until its first full evaluation within the tolerance. Session: it
// knows how many of the budget's evaluations are left, as the tuner does in a session with --budget (its endgame),
// and walks the budget.
enum class HalvingWalk { ToBest, Session };

Walk walkHalving(const Replay& rp, const std::string& strategy, std::uint64_t seed, double tolerance,
    const tuner::HalvingPlan& plan, std::size_t budget, HalvingWalk kind)
{
    tuner::MultiFidelitySearch search(tuner::makeStrategy(strategy, rp.space, seed), plan);
    std::mt19937_64 noise(seed * 0x9E3779B97F4A7C15ull + 17);
    const bool session = kind == HalvingWalk::Session;
    Reach r;
    Walk w;
    w.toBestDone = session; // the session's walk takes only the whole-session figure
    w.wholeDone = !session;
    while (!search.exhausted()) {
        const auto trials = search.next(1, session ? std::optional<std::size_t>(budget - r.evaluations) : std::nullopt);
        if (trials.empty())
            break;
        for (const tuner::Trial& t : trials) {
            ++r.evaluations;
            if (t.rung < plan.fullRung()) {
                r.screenedWithin = r.screenedWithin || rp.cost[t.index] <= rp.best * (1 + tolerance);
                const double ms = screenMs(rp, t.index, plan.screens[t.rung]);
                r.deviceMs += ms;
                search.observe(t, screenCost(rp, t.index, plan.screens[t.rung], noise), ms);
            } else {
                ++r.full;
                r.deviceMs += fullMs(rp.records[t.index]);
                search.observe(t, rp.cost[t.index], fullMs(rp.records[t.index]));
                if (!r.reached && rp.cost[t.index] <= rp.best * (1 + tolerance)) {
                    r.reached = true;
                    r.eta = search.etaAt(0);
                }
            }
            if (w.record(r, budget))
                return w;
        }
    }
    return w.end(r);
}

template <typename T> double quantile(std::vector<T> v, double q)
{
    std::sort(v.begin(), v.end());
    const double pos = q * static_cast<double>(v.size() - 1);
    const std::size_t lo = static_cast<std::size_t>(pos);
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return static_cast<double>(v[lo]) + (pos - static_cast<double>(lo)) * static_cast<double>(v[hi] - v[lo]);
}

// Whole sessions' evaluations, full protocol alone and under multi-fidelity search.
struct Budgets {
    std::size_t alone = 60;
    std::size_t halving = 0; // --halving-budget, else alone's
};

std::string report(const Replay& rp, int seeds, double tolerance, const tuner::HalvingPlan& plan, Budgets budget)
{
    std::map<std::string, std::vector<Reach>> alone, halving, wholeAlone, wholeHalving;
    for (const std::string& s : tuner::strategyNames())
        for (int seed = 1; seed <= seeds; ++seed) {
            const auto u = static_cast<std::uint64_t>(seed);
            const Walk a = walkAlone(rp, s, u, tolerance, budget.alone);
            alone[s].push_back(a.toBest);
            wholeAlone[s].push_back(a.whole);
            halving[s].push_back(walkHalving(rp, s, u, tolerance, plan, budget.halving, HalvingWalk::ToBest).toBest);
            wholeHalving[s].push_back(
                walkHalving(rp, s, u, tolerance, plan, budget.halving, HalvingWalk::Session).whole);
        }
    auto column = [](const std::vector<Reach>& runs, auto field) {
        std::vector<double> v;
        for (const Reach& r : runs)
            v.push_back(static_cast<double>(field(r)));
        return v;
    };
    auto evaluations = [](const Reach& r) { return r.evaluations; };
    auto seconds = [](const Reach& r) { return r.deviceMs * 1e-3; };
    auto reached = [](const std::vector<Reach>& runs) {
        return std::count_if(runs.begin(), runs.end(), [](const Reach& r) { return r.reached; });
    };
    const double randomMedian = quantile(column(alone["random"], evaluations), 0.5);
    std::string etaText;
    {
        std::vector<double> etas;
        for (const auto& [name, runs] : halving)
            for (const Reach& r : runs)
                if (r.reached)
                    etas.push_back(r.eta);
        char e[160];
        if (plan.eta > 0)
            std::snprintf(e, sizeof e, "%g", plan.eta);
        else
            std::snprintf(e, sizeof e, "eta (balanced: full over screen device time within [%g, %g], median %.1f)",
                tuner::HalvingPlan::kMinEta, tuner::HalvingPlan::kMaxEta, etas.empty() ? 0.0 : quantile(etas, 0.5));
        etaText = e;
    }
    std::ostringstream md;
    char buf[1024];
    std::snprintf(buf, sizeof buf,
        "Evaluations to come within %.0f%% of the exhaustive best (%zu recorded configurations, %zu "
        "valid), over %d seeds:\n\n",
        tolerance * 100, rp.space.size(), rp.valid, seeds);
    md << buf;
    md << "| strategy | median | p25 | p75 | worst | median vs random |\n|---|---|---|---|---|---|\n";
    for (const std::string& s : tuner::strategyNames()) {
        const auto v = column(alone[s], evaluations);
        std::snprintf(buf, sizeof buf, "| %s | %.1f | %.1f | %.1f | %.0f | %.2fx fewer |\n", s.c_str(),
            quantile(v, 0.5), quantile(v, 0.25), quantile(v, 0.75), *std::max_element(v.begin(), v.end()),
            randomMedian / std::max(1.0, quantile(v, 0.5)));
        md << buf;
    }
    md << "\nexhaustive enumerates in declaration order (one order, every seed alike).\n\n";
    std::snprintf(buf, sizeof buf,
        "Device time to the same final best (a full-protocol evaluation within %.0f%% of the exhaustive best), "
        "median over %d seeds; multi-fidelity: screens of %s, one in %s promoted (asynchronous successive "
        "halving)%s:\n\n",
        tolerance * 100, seeds, plan.screens.front().label().c_str(), etaText.c_str(),
        (std::string(rp.deviceMsRecorded ? "" : "; records without device_ms priced at finished - started")
            + (rp.screensRecorded == rp.records.size() ? "; every screen measured (its recorded device_ms and result)"
                    : rp.screensRecorded > 0           ? "; " + std::to_string(rp.screensRecorded) + " of "
                        + std::to_string(rp.records.size()) + " screens measured, the rest priced from the full records"
                                             : "; screens priced from the full records")
            + (rp.verifyMsRecorded || rp.screensRecorded == rp.records.size()
                    ? ""
                    : "; records without verify_ms: priced screens verify every shape"))
            .c_str());
    md << buf;
    md << "| strategy | full protocol: device s | evaluations | multi-fidelity: device s | evaluations (full) | "
          "reached | device time ratio |\n|---|---|---|---|---|---|---|\n";
    for (const std::string& s : tuner::strategyNames()) {
        const double a = quantile(column(alone[s], seconds), 0.5), h = quantile(column(halving[s], seconds), 0.5);
        std::snprintf(buf, sizeof buf, "| %s | %.3f | %.1f | %.3f | %.1f (%.1f) | %td/%d | %.2fx less |\n", s.c_str(),
            a, quantile(column(alone[s], evaluations), 0.5), h, quantile(column(halving[s], evaluations), 0.5),
            quantile(column(halving[s], [](const Reach& r) { return r.full; }), 0.5), reached(halving[s]), seeds,
            a / std::max(1e-9, h));
        md << buf;
    }
    std::snprintf(buf, sizeof buf,
        "\nWhole sessions of %zu evaluations alone and %zu under multi-fidelity search (screens included), median over "
        "%d seeds: device time, and the seeds whose best full evaluation ended within %.0f%% of the exhaustive best; "
        "%s. The multi-fidelity sessions that missed: never screened a configuration within %.0f%%, or screened one "
        "and never promoted it:\n\n",
        budget.alone, budget.halving, seeds, tolerance * 100,
        plan.endgame > 0 ? ("multi-fidelity sessions know their budget, and their last " + std::to_string(plan.endgame)
            + " evaluations promote the best screens not yet promoted")
                               .c_str()
                         : "multi-fidelity sessions screen to the end of their budget (no endgame)",
        tolerance * 100);
    md << buf;
    md << "| strategy | alone: device s | ended within | multi-fidelity: device s | full evaluations | ended within | "
          "device time ratio | missed: never screened | screened, not promoted "
          "|\n|---|---|---|---|---|---|---|---|---|\n";
    for (const std::string& s : tuner::strategyNames()) {
        const double a = quantile(column(wholeAlone[s], seconds), 0.5);
        const double h = quantile(column(wholeHalving[s], seconds), 0.5);
        const auto missed = [&](bool screened) {
            return std::count_if(wholeHalving[s].begin(), wholeHalving[s].end(),
                [&](const Reach& r) { return !r.reached && r.screenedWithin == screened; });
        };
        std::snprintf(buf, sizeof buf, "| %s | %.3f | %td/%d | %.3f | %.1f | %td/%d | %.2fx less | %td | %td |\n",
            s.c_str(), a, reached(wholeAlone[s]), seeds, h,
            quantile(column(wholeHalving[s], [](const Reach& r) { return r.full; }), 0.5), reached(wholeHalving[s]),
            seeds, a / std::max(1e-9, h), missed(false), missed(true));
        md << buf;
    }
    return md.str();
}

} // namespace

int main(int argc, char** argv)
{
    std::string dbFile, problem, outFile, sweepFile, landscape = "bowl";
    int seeds = 10;
    bool withScreens = false;
    double tolerance = 0.03;
    Budgets budget;
    std::optional<std::size_t> halvingBudget;
    tuner::HalvingPlan plan;
    plan.screens = { Fidelity { 5, 1 } };
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
        else if (a == "--landscape")
            landscape = value();
        else if (a == "--with-screens")
            withScreens = true;
        else if (a == "--screen-samples")
            plan.screens.front().screenSamples = std::stoi(value());
        else if (a == "--screen-shapes")
            plan.screens.front().screenShapes = std::stoi(value());
        else if (a == "--eta")
            plan.eta = std::stod(value());
        else if (a == "--endgame")
            plan.endgame = static_cast<std::size_t>(std::max(0, std::stoi(value())));
        else if (a == "--budget")
            budget.alone = static_cast<std::size_t>(std::max(1, std::stoi(value())));
        else if (a == "--halving-budget")
            halvingBudget = static_cast<std::size_t>(std::max(1, std::stoi(value())));
        else {
            std::cerr
                << "usage: kl_bench_tuner_search --db FILE [--problem NAME] [--seeds N] [--tolerance F] "
                   "[--out FILE.md] [--screen-samples N] [--screen-shapes N] [--eta F] [--budget N]\n"
                   "                             [--endgame N] [--halving-budget N]\n"
                   "       kl_bench_tuner_search --synthetic-sweep FILE [--landscape bowl|plateau|flat|rugged|ridge]\n"
                   "                             [--with-screens [--screen-samples N] [--screen-shapes N]]\n";
            return 2;
        }
    }
    try {
        if (!sweepFile.empty())
            return syntheticSweep(
                sweepFile, landscape, withScreens ? std::optional<Fidelity>(plan.screens.front()) : std::nullopt);
        if (dbFile.empty()) {
            std::cerr << "kl_bench_tuner_search: --db FILE is required\n";
            return 2;
        }
        if (seeds < 1 || plan.screens.front().screenSamples < 1)
            throw InputError("--seeds and --screen-samples must be at least 1");
        auto db = TuningDatabase::open(dbFile);
        const Replay rp = loadReplay(*db, problem, plan.screens.front());
        budget.halving = halvingBudget.value_or(budget.alone);
        const std::string md = report(rp, seeds, tolerance, plan, budget);
        std::cout << md;
        if (!outFile.empty()) {
            std::ofstream out(outFile);
            out << md;
        }
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "kl_bench_tuner_search: " << e.what() << "\n";
        return 1;
    }
}
