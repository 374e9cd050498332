#pragma once
// Builds real sessions on disk (kl::SessionStore) with realistic per-shape results for the export tests.
#include "core/json_io.h"
#include "core/session_store.h"
#include "tests/support/temp_dir.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace kl::test {

inline std::filesystem::path fixtureDir(const std::string& name)
{
    return std::filesystem::path(KL_SOURCE_DIR) / "tests/export/fixtures" / name;
}

struct ShapeOutcome {
    std::map<std::string, std::int64_t> dims;
    bool correct = true;
    double speedup = 0; // 0: verified, not timed
    double ciHalfWidth = 0.02;
    bool heldOut = false;
};

inline ShapeResult shapeResult(const ShapeOutcome& o)
{
    ShapeResult r;
    r.shape.dims = o.dims;
    r.heldOut = o.heldOut;
    r.correct = o.correct;
    for (const char* dist : { "normal", "large", "order:A", "order:B", "order:A'" }) {
        CorrectnessStats c;
        c.distribution = dist;
        c.relL2 = o.correct ? 2.1e-3 : 0.4;
        c.maxAbs = o.correct ? 0.0156 : 3.0;
        c.passed = o.correct;
        c.seed = 12345;
        r.checks.push_back(c);
    }
    if (o.speedup > 0) {
        TimingStats base;
        base.medianUs = 40.0;
        base.p10Us = 39.5;
        base.p90Us = 41.0;
        base.ciLowUs = 39.8;
        base.ciHighUs = 40.3;
        base.samples = 200;
        TimingStats t = base;
        t.medianUs = base.medianUs / o.speedup;
        t.p10Us = t.medianUs * 0.99;
        t.p90Us = t.medianUs * 1.02;
        t.ciLowUs = t.medianUs * 0.995;
        t.ciHighUs = t.medianUs * 1.005;
        r.timing = t;
        r.baselineTiming = base;
        r.speedup = o.speedup;
        r.speedupCiLow = o.speedup - o.ciHalfWidth;
        r.speedupCiHigh = o.speedup + o.ciHalfWidth;
    }
    return r;
}

// The rmsnorm fixture's realistic outcome: slower at one token, faster from 128 tokens on, a held-out
// shape timed and one only verified.
inline std::vector<ShapeOutcome> rmsnormOutcomes()
{
    return {
        { { { "T", 1 }, { "H", 1024 } }, true, 0.90 },
        { { { "T", 1 }, { "H", 16384 } }, true, 0.97, 0.04 },
        { { { "T", 128 }, { "H", 4096 } }, true, 1.30 },
        { { { "T", 4096 }, { "H", 4096 } }, true, 1.52 },
        { { { "T", 4096 }, { "H", 16384 } }, true, 1.61 },
        { { { "T", 65536 }, { "H", 1024 } }, true, 1.21 },
        { { { "T", 65536 }, { "H", 16384 } }, true, 1.40 },
        { { { "T", 777 }, { "H", 6144 } }, true, 1.35, 0.02, true },
        { { { "T", 20000 }, { "H", 2048 } }, true, 0, 0.02, true },
    };
}

struct BuiltSession {
    std::filesystem::path dir;
    Problem problem;
    std::string candidateId;
    std::string rootId;
};

inline Evaluation evaluationFor(const std::string& id, const std::vector<ShapeOutcome>& outcomes,
    Verdict verdict = Verdict::Accepted, std::vector<VerdictReason> reasons = {})
{
    Evaluation e;
    e.candidateId = id;
    e.verdict = verdict;
    e.reasons = std::move(reasons);
    e.compile.ok = true;
    for (const auto& o : outcomes)
        e.shapes.push_back(shapeResult(o));
    e.objective = 1.38;
    e.objectiveCiLow = 1.35;
    e.objectiveCiHigh = 1.41;
    e.deviceBefore.available = true;
    e.deviceBefore.smClockMHz = 1980;
    e.deviceAfter = e.deviceBefore;
    e.startedMs = 1764470000000;
    e.finishedMs = 1764470004000;
    return e;
}

// A session with a reference root and one tuned candidate evaluated with `outcomes`.
inline BuiltSession buildSessionFrom(const std::filesystem::path& problemFolder,
    const std::filesystem::path& candidateFile, const std::vector<ShapeOutcome>& outcomes,
    Verdict verdict = Verdict::Accepted, std::vector<VerdictReason> reasons = {},
    const std::string& hypothesisText = "Split the row reduction across blocks", const std::string& sourceSuffix = "",
    const std::filesystem::path& sessionDir = {})
{
    BuiltSession b;
    b.problem = loadProblem(problemFolder.string());
    const std::string fixture = b.problem.name;
    b.dir = sessionDir.empty() ? kl::test::freshDir(fixture) : sessionDir;
    Session header;
    header.id = sessionDir.empty() ? "s-" + fixture : "synthetic-" + fixture; // the export bench labels its own
    header.problemName = b.problem.name;
    header.problemFolder = problemFolder.string();
    header.device.name = "NVIDIA H200";
    header.device.ccMajor = 9;
    header.device.ccMinor = 0;
    header.device.arch = "sm_90a";
    header.device.smCount = 132;
    header.device.driverVersion = "580.95.05";
    header.device.cudaDriverApi = "13.0";
    header.device.cudaRuntime = "13.0";
    header.device.uuid = "GPU-fbeadc78-f729-8895-3e97-a8c124775bbe";
    header.settings.agent = "tuner:anneal";
    header.createdMs = 1764469000000;
    auto store = SessionStore::create(b.dir, header);
    Hypothesis h;
    h.id = "h0001";
    h.text = hypothesisText;
    h.createdMs = 1764469100000;
    store->addHypothesis(h);
    const std::string source = readFile(candidateFile) + sourceSuffix;
    Candidate root;
    root.source = source;
    root.params = parseKernelSpec(source).defaults();
    root.author = Author::Human;
    root.hypothesisId = "h0001";
    store->proposeCandidate(root);
    b.rootId = store->session().tree.order().back();
    Candidate tuned = root;
    tuned.id.clear();
    tuned.parentId = b.rootId;
    tuned.author = Author::Tuner;
    tuned.agent = "tuner:anneal";
    if (tuned.params.count("BLOCK"))
        tuned.params["BLOCK"] = 128;
    store->proposeCandidate(tuned);
    b.candidateId = store->session().tree.order().back();
    store->recordEvaluation(evaluationFor(b.candidateId, outcomes, verdict, std::move(reasons)));
    return b;
}

inline BuiltSession buildSession(const std::string& fixture, const std::vector<ShapeOutcome>& outcomes,
    Verdict verdict = Verdict::Accepted, std::vector<VerdictReason> reasons = {},
    const std::string& hypothesisText = "Split the row reduction across blocks", const std::string& sourceSuffix = "")
{
    return buildSessionFrom(fixtureDir(fixture), fixtureDir(fixture) / "candidate.cu", outcomes, verdict,
        std::move(reasons), hypothesisText, sourceSuffix);
}

// Outcomes for any problem: its verify and tuning shapes, the corners of its validity range and two
// held-out shapes, all correct; shapes whose first dim is below 64 measured slower, the rest faster.
inline std::vector<ShapeOutcome> syntheticOutcomes(const Problem& p)
{
    std::set<Shape> shapes(p.verifyShapes.begin(), p.verifyShapes.end());
    shapes.insert(p.tuningShapes.begin(), p.tuningShapes.end());
    for (std::size_t mask = 0; mask < (std::size_t(1) << p.dims.size()); ++mask) {
        Shape s;
        for (std::size_t d = 0; d < p.dims.size(); ++d) {
            const auto m = std::max<std::int64_t>(1, p.dims[d].multipleOf);
            s.dims[p.dims[d].name] = (mask >> d) & 1 ? p.dims[d].max / m * m : (p.dims[d].min + m - 1) / m * m;
        }
        if (p.shapeIsValid(s))
            shapes.insert(s);
    }
    // Corners a joint constraint excludes (R*C <= ...): each dim's extreme with the others at their minimum.
    for (std::size_t d = 0; d < p.dims.size(); ++d) {
        Shape s;
        for (std::size_t e = 0; e < p.dims.size(); ++e) {
            const auto m = std::max<std::int64_t>(1, p.dims[e].multipleOf);
            s.dims[p.dims[e].name] = e == d ? p.dims[e].max / m * m : (p.dims[e].min + m - 1) / m * m;
        }
        shapes.insert(s);
    }
    std::vector<ShapeOutcome> out;
    const std::string first = p.dims.front().name;
    for (const auto& s : shapes)
        out.push_back({ s.dims, true, s.dims.at(first) < 64 ? 0.92 : 1.35 });
    std::size_t held = 0;
    for (const auto& s : p.verifyShapes)
        if (held < 2 && s.dims.at(first) >= 64 && !std::count_if(out.begin(), out.end(), [&](const ShapeOutcome& o) {
                return o.heldOut && o.dims == s.dims;
            })) {
            for (auto& o : out)
                if (o.dims == s.dims) {
                    o.heldOut = true;
                    ++held;
                }
        }
    if (held == 0 && !out.empty())
        out.back().heldOut = true;
    return out;
}

// Shape regimes (issue 20): the rmsnorm fixture with decode (T <= 256) / prefill regimes and a winner for each.
// The decode specialist: faster at few tokens, slower from 256 on.
inline std::vector<ShapeOutcome> decodeSpecialist()
{
    return {
        { { { "T", 1 }, { "H", 1024 } }, true, 1.30 },
        { { { "T", 16 }, { "H", 4096 } }, true, 1.40 },
        { { { "T", 128 }, { "H", 4096 } }, true, 1.25 },
        { { { "T", 40 }, { "H", 2048 } }, true, 1.30, 0.02, true },
        { { { "T", 256 }, { "H", 16384 } }, true, 0.95 },
        { { { "T", 4096 }, { "H", 4096 } }, true, 0.90 },
        { { { "T", 65536 }, { "H", 16384 } }, true, 0.80 },
        { { { "T", 20000 }, { "H", 2048 } }, true, 0, 0.02, true },
    };
}

// The prefill specialist: slower at few tokens, faster from 300 on.
inline std::vector<ShapeOutcome> prefillSpecialist()
{
    return {
        { { { "T", 1 }, { "H", 1024 } }, true, 0.70 },
        { { { "T", 16 }, { "H", 4096 } }, true, 0.80 },
        { { { "T", 300 }, { "H", 1024 } }, true, 1.20, 0.02, true },
        { { { "T", 4096 }, { "H", 4096 } }, true, 1.50 },
        { { { "T", 777 }, { "H", 6144 } }, true, 1.35, 0.02, true },
        { { { "T", 65536 }, { "H", 1024 } }, true, 1.30 },
        { { { "T", 65536 }, { "H", 16384 } }, true, 1.40 },
    };
}

inline RegimeResult regimeResult(const char* name, const char* when, double objective, bool won)
{
    return { name, when, objective, objective * 0.99, objective * 1.01, 2, 4, won };
}

struct RegimeSession {
    BuiltSession built;
    Problem problem; // the fixture with decode / prefill regimes
    std::string decodeWinner;
    std::string prefillWinner;
    ~RegimeSession() { std::filesystem::remove_all(built.dir); }
};

// Two tuned candidates: the decode specialist won decode, the prefill specialist won prefill (unless
// prefillWins is false: then it won nothing and was rejected).
inline void buildRegimeSession(RegimeSession& r, bool prefillWins = true)
{
    r.built = buildSession("rmsnorm_fx", decodeSpecialist());
    r.problem = r.built.problem;
    r.problem.regimes = { { "decode", Expr::parse("T <= 256") }, { "prefill", Expr::parse("T > 256") } };
    auto store = SessionStore::open(r.built.dir);
    Evaluation decode = store->session().evaluations.at(r.built.candidateId);
    decode.regimes = { regimeResult("decode", "T <= 256", 1.3, true), regimeResult("prefill", "T > 256", 0.85, false) };
    store->recordEvaluation(decode);
    r.decodeWinner = r.built.candidateId;
    Candidate other = store->session().tree.at(r.built.candidateId);
    other.id.clear();
    other.params["BLOCK"] = 256;
    store->proposeCandidate(other);
    r.prefillWinner = store->session().tree.order().back();
    Evaluation prefill
        = evaluationFor(r.prefillWinner, prefillSpecialist(), prefillWins ? Verdict::Accepted : Verdict::Rejected);
    prefill.regimes
        = { regimeResult("decode", "T <= 256", 0.75, false), regimeResult("prefill", "T > 256", 1.45, prefillWins) };
    store->recordEvaluation(prefill);
}

} // namespace kl::test
