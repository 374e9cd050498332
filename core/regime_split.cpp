#include "core/regime_split.h"

#include "core/errors.h"
#include "core/json_io.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

namespace kl {
namespace {

    // A part of the range: a regime of the problem (its name and condition; empty: the whole range) and, for each
    // dim split inside it, the shapes above `above` and up to `upTo`.
    struct Bounds {
        std::string regime;
        std::string regimeCondition;
        std::map<std::string, std::int64_t> above;
        std::map<std::string, std::int64_t> upTo;
    };

    struct Part {
        Bounds bounds;
        std::vector<std::size_t> shapes; // indices into the tuning shapes
        std::size_t best = 0; // index into the configurations
        double logObjective = 0; // weighted mean log speedup of best over the part's shapes
    };

    struct Configurations {
        std::vector<CandidateId> ids;
        std::vector<std::vector<double>> logSpeedup; // [configuration][tuning shape]
    };

    // Trusted for a split: fully timed, correct everywhere, and rejected (if at all) only by the loop's own
    // comparison with the best; a referee flag counts once the engineer accepted the candidate.
    bool trusted(const Candidate& c, const Evaluation& e)
    {
        if (e.fidelity.screen() || !e.correctEverywhere() || !ranToCompletion(e.verdict))
            return false;
        for (const VerdictReason& r : e.reasons)
            if (!isLoopDecision(r) && c.status != CandidateStatus::Accepted)
                return false;
        return true;
    }

    // The visible shapes an evaluation timed against the baseline, in shape order (verify-only shapes have no speedup).
    // Pointers into the session, not copies: the workbench's Regimes dock runs this on every snapshot it gets.
    std::vector<const ShapeResult*> timedVisible(const Evaluation& e)
    {
        std::vector<const ShapeResult*> out;
        for (const ShapeResult& r : e.shapes)
            if (!r.heldOut && r.speedup > 0)
                out.push_back(&r);
        std::sort(
            out.begin(), out.end(), [](const ShapeResult* a, const ShapeResult* b) { return a->shape < b->shape; });
        return out;
    }

    // The session's tuning shapes as it timed them (the problem's, or those `kloop run --shapes` chose): the set of
    // visible timed shapes most of its trusted evaluations share, and the configurations that timed all of it.
    Configurations collect(
        const Session& s, const std::string& gpu, const std::string& problemName, std::vector<Shape>& shapes)
    {
        std::map<std::vector<Shape>, int> sets;
        std::vector<std::pair<CandidateId, std::vector<const ShapeResult*>>> timed;
        for (const CandidateId& id : s.tree.order()) {
            const auto it = s.evaluations.find(id);
            if (it == s.evaluations.end() || !trusted(s.tree.at(id), it->second) || gpuModelOf(s, it->second) != gpu)
                continue;
            std::vector<const ShapeResult*> t = timedVisible(it->second);
            if (t.empty())
                continue;
            std::vector<Shape> key;
            for (const ShapeResult* r : t)
                key.push_back(r->shape);
            ++sets[key];
            timed.emplace_back(id, std::move(t));
        }
        if (sets.empty())
            throw InputError("session " + s.id + ": no configuration of " + problemName + " on " + gpu
                + " is correct and timed against the baseline, so there is nothing to split");
        const auto common = std::max_element(
            sets.begin(), sets.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
        shapes = common->first; // as the first record of the set holds them, with their weights
        Configurations out;
        for (const auto& [id, t] : timed) {
            std::vector<double> logs;
            for (const Shape& want : common->first) {
                const auto r = std::find_if(t.begin(), t.end(), [&](const ShapeResult* x) { return x->shape == want; });
                if (r == t.end())
                    break;
                logs.push_back(std::log((*r)->speedup));
            }
            if (logs.size() != common->first.size())
                continue;
            out.ids.push_back(id);
            out.logSpeedup.push_back(std::move(logs));
        }
        return out;
    }

    // A part no tuning shape lies in keeps no best (a problem regime nothing times: its fallback serves it).
    void chooseBest(Part& p, const Configurations& c, const std::vector<Shape>& shapes)
    {
        double weight = 0;
        for (std::size_t i : p.shapes)
            weight += shapes[i].weight;
        p.logObjective = -INFINITY;
        if (p.shapes.empty())
            return;
        for (std::size_t k = 0; k < c.ids.size(); ++k) {
            double sum = 0;
            for (std::size_t i : p.shapes)
                sum += shapes[i].weight * c.logSpeedup[k][i];
            if (sum / weight > p.logObjective) {
                p.logObjective = sum / weight;
                p.best = k;
            }
        }
    }

    double totalLog(const std::vector<Part>& parts, const std::vector<Shape>& shapes)
    {
        double sum = 0, weight = 0;
        for (const Part& p : parts)
            for (std::size_t i : p.shapes) {
                sum += shapes[i].weight * p.logObjective;
                weight += shapes[i].weight;
            }
        return sum / weight;
    }

    // Where to cut between two neighbouring tuning values lo < hi: the middle (geometric for log-uniform dims),
    // on a power of two when one lies near it, and on the dim's multiple.
    std::int64_t cutBetween(const DimSpec& d, std::int64_t lo, std::int64_t hi)
    {
        const std::int64_t m = std::max<std::int64_t>(d.multipleOf, 1);
        const double mid
            = d.logUniform ? std::sqrt(static_cast<double>(lo) * static_cast<double>(hi)) : (lo + hi) / 2.0;
        if (d.logUniform) {
            const double p = std::exp2(std::round(std::log2(mid)));
            const auto pi = static_cast<std::int64_t>(p);
            if (pi >= lo && pi < hi && pi % m == 0)
                return pi;
        }
        const std::int64_t t = static_cast<std::int64_t>(std::floor(mid / static_cast<double>(m))) * m;
        return std::clamp(t, lo, hi - 1);
    }

    std::string conditionOf(const Bounds& b)
    {
        std::map<std::string, std::string> byDim; // dims in name order, lower bound first
        for (const auto& [dim, v] : b.above)
            byDim[dim] = dim + " > " + std::to_string(v);
        for (const auto& [dim, v] : b.upTo)
            byDim[dim] += (byDim[dim].empty() ? "" : " && ") + dim + " <= " + std::to_string(v);
        std::string text;
        for (const auto& [dim, atoms] : byDim)
            text += (text.empty() ? "" : " && ") + atoms;
        if (b.regimeCondition.empty())
            return text.empty() ? "1" : text;
        if (text.empty())
            return b.regimeCondition;
        const bool plain
            = b.regimeCondition.find("||") == std::string::npos && b.regimeCondition.find('?') == std::string::npos;
        return (plain ? b.regimeCondition : "(" + b.regimeCondition + ")") + " && " + text;
    }

    std::string nameOf(const Bounds& b, std::size_t index)
    {
        std::map<std::string, std::string> byDim;
        auto lower = [](std::string s) {
            std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
            return s;
        };
        for (const auto& [dim, v] : b.above)
            byDim[dim] = lower(dim) + "_gt_" + std::to_string(v);
        for (const auto& [dim, v] : b.upTo)
            byDim[dim] += (byDim[dim].empty() ? "" : "_") + lower(dim) + "_le_" + std::to_string(v);
        std::string name = b.regime;
        for (const auto& [dim, atoms] : byDim)
            name += (name.empty() ? "" : "_") + atoms;
        if (name.empty())
            return "all";
        return isRegimeName(name) ? name : "regime" + std::to_string(index + 1);
    }

    // The best split of any part along any dim, or none when nothing splits.
    std::optional<std::vector<Part>> bestSplit(const std::vector<Part>& parts, const Problem& problem,
        const Configurations& c, const std::vector<Shape>& shapes)
    {
        std::optional<std::vector<Part>> best;
        double bestLog = -INFINITY;
        for (std::size_t pi = 0; pi < parts.size(); ++pi)
            for (const DimSpec& d : problem.dims) {
                if (d.constant)
                    continue;
                std::vector<std::int64_t> values;
                for (std::size_t i : parts[pi].shapes)
                    values.push_back(shapes[i].dims.at(d.name));
                std::sort(values.begin(), values.end());
                values.erase(std::unique(values.begin(), values.end()), values.end());
                for (std::size_t v = 0; v + 1 < values.size(); ++v) {
                    const std::int64_t cut = cutBetween(d, values[v], values[v + 1]);
                    Part low { parts[pi].bounds, {}, 0, 0 }, high { parts[pi].bounds, {}, 0, 0 };
                    low.bounds.upTo[d.name] = cut;
                    high.bounds.above[d.name] = cut;
                    for (std::size_t i : parts[pi].shapes)
                        (shapes[i].dims.at(d.name) <= cut ? low : high).shapes.push_back(i);
                    chooseBest(low, c, shapes);
                    chooseBest(high, c, shapes);
                    std::vector<Part> next = parts;
                    next[pi] = std::move(low);
                    next.insert(next.begin() + static_cast<std::ptrdiff_t>(pi) + 1, std::move(high));
                    const double l = totalLog(next, shapes);
                    if (l > bestLog) {
                        bestLog = l;
                        best = std::move(next);
                    }
                }
            }
        return best;
    }

} // namespace

RegimeSplit learnRegimes(const Problem& problem, const Session& session, const RegimeSplitOptions& options)
{
    // The GPU model that timed most of the session: one model's speedups are comparable with each other.
    std::map<std::string, int> perGpu;
    for (const auto& [id, e] : session.evaluations)
        if (!e.fidelity.screen() && !e.shapes.empty())
            ++perGpu[gpuModelOf(session, e)];
    RegimeSplit out;
    out.gpu = session.device.name;
    int most = 0;
    for (const auto& [gpu, n] : perGpu)
        if (n > most) {
            most = n;
            out.gpu = gpu;
        }
    std::vector<Shape> shapes;
    const Configurations c = collect(session, out.gpu, problem.name, shapes);
    out.configurations = static_cast<int>(c.ids.size());
    out.shapes = static_cast<int>(shapes.size());

    Part whole;
    for (std::size_t i = 0; i < shapes.size(); ++i)
        whole.shapes.push_back(i);
    chooseBest(whole, c, shapes);
    out.singleBest = c.ids[whole.best];
    out.singleObjective = std::exp(whole.logObjective);

    // The problem's regimes are where splitting starts: they say what its author knows (decode is timed under CUDA
    // graphs, prefill is bandwidth), which the tuning shapes' speedups alone do not.
    std::vector<Part> parts;
    if (options.refineProblemRegimes && !problem.regimes.empty()) {
        for (std::size_t r = 0; r < problem.regimes.size(); ++r) {
            Part p;
            p.bounds.regime = problem.regimes[r].name;
            p.bounds.regimeCondition = problem.regimes[r].condition.text();
            for (std::size_t i = 0; i < shapes.size(); ++i)
                if (problem.regimes[r].contains(shapes[i]))
                    p.shapes.push_back(i);
            chooseBest(p, c, shapes);
            parts.push_back(std::move(p));
        }
    } else {
        parts.push_back(whole);
    }
    out.startObjective = std::exp(totalLog(parts, shapes));
    while (static_cast<int>(parts.size()) < std::max(1, options.maxRegimes)) {
        std::optional<std::vector<Part>> next = bestSplit(parts, problem, c, shapes);
        // Strictly above the minimum (and above rounding): a split that changes no winner is not one.
        if (!next || totalLog(*next, shapes) - totalLog(parts, shapes) <= std::log1p(options.minGain) + 1e-12)
            break;
        parts = std::move(*next);
        ++out.cuts;
    }
    out.objective = std::exp(totalLog(parts, shapes));
    for (std::size_t k = 0; k < parts.size(); ++k) {
        const Part& p = parts[k];
        LearnedRegime r;
        r.name = nameOf(p.bounds, k);
        r.condition = conditionOf(p.bounds);
        for (std::size_t i : p.shapes)
            r.shapes.push_back(shapes[i]);
        if (p.shapes.empty()) {
            out.regimes.push_back(std::move(r));
            continue;
        }
        r.best = c.ids[p.best];
        r.objective = std::exp(p.logObjective);
        double sum = 0, weight = 0;
        for (std::size_t i : p.shapes) {
            sum += shapes[i].weight * c.logSpeedup[whole.best][i];
            weight += shapes[i].weight;
        }
        r.singleObjective = std::exp(sum / weight);
        out.regimes.push_back(std::move(r));
    }
    return out;
}

std::string regimesJson(const RegimeSplit& split)
{
    nlohmann::json a = nlohmann::json::array();
    if (split.regimes.size() > 1)
        for (const LearnedRegime& r : split.regimes)
            a.push_back({ { "name", r.name }, { "when", r.condition } });
    return a.dump();
}

Problem writeProblemWithRegimes(
    const std::filesystem::path& from, const std::filesystem::path& to, const RegimeSplit& split)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(to, ec) && !fs::is_empty(to, ec))
        throw InputError(to.string() + ": exists and is not empty; the problem's copy needs a new folder");
    const fs::path source = from / "problem.json";
    nlohmann::ordered_json j;
    try {
        std::ifstream in(source);
        if (!in)
            throw InputError(source.string() + ": cannot be read");
        j = nlohmann::ordered_json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(source.string() + ": " + e.what());
    }
    fs::create_directories(to, ec);
    fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
    if (ec)
        throw InputError(to.string() + ": cannot copy " + from.string() + " there: " + ec.message());
    const nlohmann::ordered_json regimes = nlohmann::ordered_json::parse(regimesJson(split));
    if (regimes.empty())
        j.erase("regimes");
    else
        j["regimes"] = regimes;
    {
        std::ofstream out(to / "problem.json", std::ios::trunc);
        out << j.dump(2) << "\n";
        if (!out)
            throw InputError((to / "problem.json").string() + ": cannot be written");
    }
    return loadProblem(to.string());
}

} // namespace kl
