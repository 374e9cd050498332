#pragma once
// FOR TESTS AND THE OFFLINE BENCHMARK ONLY: a deterministic stand-in for the GPU evaluator. It times
// nothing; a configuration's "latency" is a fixed function of its parameters and the shape, so loop
// decisions, stopping, resume and search strategies can be checked exactly in CI. The product never
// links it (it lives under tests/).
#include "core/evaluator.h"
#include "core/kernel_spec.h"
#include "core/session_store.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace kl::testonly {

// Timing of a measurement of `us` with a tight spread (50 samples unless told).
inline TimingStats syntheticTiming(double us, int samples = 50)
{
    TimingStats t;
    t.medianUs = us;
    t.p10Us = us * 0.99;
    t.p90Us = us * 1.01;
    t.ciLowUs = us * 0.995;
    t.ciHighUs = us * 1.005;
    t.samples = samples;
    return t;
}

inline const char* kSyntheticTemplate = R"(// @kl:param BLOCK = 128 in [32, 64, 128, 256, 512, 1024]
// @kl:param VEC = 1 in [1, 2, 4, 8]
// @kl:param UNROLL = 1 in [1, 2, 4]
// @kl:param ROWS = 1 in [1, 2, 4]
// @kl:constraint H % (VEC * 32) == 0
// @kl:launch synthetic_kernel grid=(ceil_div(T, ROWS)) block=(BLOCK) smem=BLOCK*VEC*ROWS*8 args=(y, x, T, H)
extern "C" __global__ void synthetic_kernel(float* y, const float* x, int T, int H) {}
)";

inline Problem syntheticProblem()
{
    Problem p;
    p.name = "synthetic";
    p.description = "deterministic test problem";
    DimSpec t;
    t.name = "T";
    t.min = 1;
    t.max = 65536;
    DimSpec h;
    h.name = "H";
    h.min = 256;
    h.max = 16384;
    h.multipleOf = 256;
    p.dims = { t, h };
    // The tensors kSyntheticTemplate's launch line passes: a candidate's arguments must name something.
    p.tensors = { { "y", DType::F32, { Expr::parse("T"), Expr::parse("H") }, TensorRole::Output, 1.0 },
        { "x", DType::F32, { Expr::parse("T"), Expr::parse("H") }, TensorRole::Input, 1.0 } };
    Shape big;
    big.dims = { { "T", 8192 }, { "H", 4096 } };
    big.weight = 3;
    Shape small;
    small.dims = { { "T", 16 }, { "H", 4096 } };
    small.weight = 1;
    Shape edge;
    edge.dims = { { "T", 1 }, { "H", 256 } };
    p.tuningShapes = { big, small };
    p.verifyShapes = { big, small, edge };
    return p;
}

inline DeviceInfo syntheticDevice()
{
    DeviceInfo d;
    d.name = "Synthetic GPU";
    d.arch = "sm_90a";
    d.ccMajor = 9;
    d.smCount = 132;
    d.sharedPerBlock = 48 * 1024;
    d.sharedPerBlockOptin = 64 * 1024;
    d.regsPerBlock = 65536;
    d.maxThreadsPerBlock = 1024;
    d.warpSize = 32;
    d.driverVersion = "000.00";
    d.cudaDriverApi = "13.0";
    d.cudaRuntime = "13.0";
    d.nvrtcVersion = "13.0";
    return d;
}

class SyntheticEvaluatorForTests final : public Evaluator {
public:
    SyntheticEvaluatorForTests()
        : m_problem(syntheticProblem())
        , m_device(syntheticDevice())
    {
    }

    // Deterministic latency model: a bowl with its minimum at BLOCK=256, VEC=4, UNROLL=2, ROWS=2 plus a
    // fixed pseudo-random ripple of +-ripple, so strategies face local structure.
    std::function<double(const ParamValues&, const Shape&)> latencyUs
        = [this](const ParamValues& p, const Shape& s) { return defaultLatency(p, s); };
    double ripple = 0.04;
    double baselineFactor = 2.5; // baseline latency = this x the bowl's minimum
    double ciRelHalfWidth = 0.01; // per-shape speedup CI
    std::function<bool(const ParamValues&, const Shape&)> incorrect; // wrong results
    std::function<std::string(const ParamValues&)> flag; // non-empty: a non-blocking referee reason
    std::function<bool(const ParamValues&)> compileFails;
    std::function<int(const ParamValues&)> registers
        = [](const ParamValues& p) { return static_cast<int>(24 * get(p, "UNROLL") + 4 * get(p, "VEC")); };
    // Called at the start of evaluate() with the call number (1-based); a test may block in it.
    std::function<void(int, const Candidate&)> onEvaluate;

    std::atomic<int> evaluateCalls { 0 };
    std::atomic<int> compileCalls { 0 };
    std::atomic<int> maxConcurrentEvaluate { 0 };

    std::vector<ParamValues> evaluatedParams() const
    {
        std::lock_guard lock(m_mutex);
        return m_evaluated;
    }
    // The current best the loop handed over with each evaluation, in order (what the referee's jump rule judges by).
    std::vector<std::optional<CurrentBest>> bestsHandedOver() const
    {
        std::lock_guard lock(m_mutex);
        return m_bests;
    }
    // The regimes the loop asked held-out shapes to be drawn in, with each evaluation.
    std::vector<std::vector<Regime>> regimesHandedOver() const
    {
        std::lock_guard lock(m_mutex);
        return m_regimes;
    }

    const DeviceInfo& device() const override { return m_device; }
    const Problem& problem() const override { return m_problem; }
    Problem& mutableProblem() { return m_problem; }
    DeviceInfo& mutableDevice() { return m_device; }

    CompileReport compile(const Candidate& c) override
    {
        ++compileCalls;
        CompileReport r;
        r.compileMs = 1;
        if (compileFails && compileFails(c.params)) {
            r.ok = false;
            r.log = "synthetic: error: forced compile failure";
            return r;
        }
        r.ok = true;
        CompileReport::KernelResources k;
        k.kernel = "synthetic_kernel";
        k.registers = registers(c.params);
        r.kernels.push_back(k);
        return r;
    }

    Evaluation evaluate(const Candidate& c, const EvaluateOptions& options, const CancelToken&) override
    {
        const int n = ++evaluateCalls;
        const int concurrent = ++m_inEvaluate;
        int seen = maxConcurrentEvaluate.load();
        while (concurrent > seen && !maxConcurrentEvaluate.compare_exchange_weak(seen, concurrent)) { }
        if (onEvaluate)
            onEvaluate(n, c);
        {
            std::lock_guard lock(m_mutex);
            m_evaluated.push_back(c.params);
            m_bests.push_back(options.best);
            m_regimes.push_back(options.regimes);
        }
        Evaluation e;
        e.candidateId = c.id;
        e.startedMs = nowMs();
        e.compile = compile(c);
        --compileCalls; // the harness reuses its compile cache; count only the pool's calls
        if (!e.compile.ok) {
            e.verdict = Verdict::CompileFailed;
            e.reasons.push_back({ "compile.error", e.compile.log, 0, true });
            --m_inEvaluate;
            return e;
        }
        e.verdict = Verdict::Correct;
        e.fidelity = options.fidelity;
        const std::vector<Shape> timedShapes = screenTuningShapes(m_problem.tuningShapes, options.fidelity);
        const int samples = options.fidelity.screen() ? options.fidelity.screenSamples : 50;
        // Device time: one launch per verified shape, then each sample of candidate and baseline per timed shape.
        for (const Shape& s : m_problem.verifyShapes) {
            e.deviceMs += latencyUs(c.params, s) * 1e-3;
            if (std::find(timedShapes.begin(), timedShapes.end(), s) != timedShapes.end())
                e.deviceMs += samples * (latencyUs(c.params, s) + baselineUs(s)) * 1e-3;
        }
        for (const Shape& s : m_problem.verifyShapes) {
            ShapeResult r;
            r.shape = s;
            r.correct = !(incorrect && incorrect(c.params, s));
            CorrectnessStats cs;
            cs.passed = r.correct;
            cs.relL2 = r.correct ? 1e-4 : 0.5;
            r.checks.push_back(cs);
            const bool timed = std::find(timedShapes.begin(), timedShapes.end(), s) != timedShapes.end();
            if (timed) {
                for (const Shape& ts : m_problem.tuningShapes)
                    if (ts == s)
                        r.shape.weight = ts.weight;
                const double t = latencyUs(c.params, s);
                const double b = baselineUs(s);
                r.timing = syntheticTiming(t, samples);
                r.baselineTiming = syntheticTiming(b, samples);
                r.speedup = b / t;
                const double ci = ciRelHalfWidth * std::sqrt(50.0 / samples);
                r.speedupCiLow = r.speedup * (1 - ci);
                r.speedupCiHigh = r.speedup * (1 + ci);
            }
            e.shapes.push_back(r);
        }
        if (flag) {
            const std::string why = flag(c.params);
            if (!why.empty())
                e.reasons.push_back({ "referee.synthetic", why, 0, false });
        }
        e.finishedMs = nowMs();
        --m_inEvaluate;
        return e;
    }

    static std::int64_t get(const ParamValues& p, const char* name)
    {
        const auto it = p.find(name);
        return it == p.end() ? 1 : it->second;
    }

    double bowlUs(const ParamValues& p, const Shape& s) const
    {
        const double work = static_cast<double>(s.dims.at("T")) * static_cast<double>(s.dims.at("H")) * 1e-4 + 2.0;
        auto sq = [](double x) { return x * x; };
        const double lb = std::log2(static_cast<double>(get(p, "BLOCK"))) - 8; // 256
        const double lv = std::log2(static_cast<double>(get(p, "VEC"))) - 2; // 4
        const double lu = std::log2(static_cast<double>(get(p, "UNROLL"))) - 1; // 2
        const double lr = std::log2(static_cast<double>(get(p, "ROWS"))) - 1; // 2
        return work * (1.0 + 0.10 * sq(lb) + 0.15 * sq(lv) + 0.08 * sq(lu) + 0.05 * sq(lr) + 0.04 * lb * lv);
    }

    double defaultLatency(const ParamValues& p, const Shape& s) const
    {
        std::string key;
        for (const auto& [k, v] : p)
            key += k + "=" + std::to_string(v) + ";";
        const std::string h = sha256Hex(key);
        const double u = static_cast<double>(std::stoul(h.substr(0, 8), nullptr, 16)) / 4294967295.0; // [0, 1]
        return bowlUs(p, s) * (1.0 + ripple * (2 * u - 1));
    }

    double baselineUs(const Shape& s) const
    {
        const double work = static_cast<double>(s.dims.at("T")) * static_cast<double>(s.dims.at("H")) * 1e-4 + 2.0;
        return work * baselineFactor;
    }

private:
    Problem m_problem;
    DeviceInfo m_device;
    mutable std::mutex m_mutex;
    std::vector<ParamValues> m_evaluated;
    std::vector<std::optional<CurrentBest>> m_bests;
    std::vector<std::vector<Regime>> m_regimes;
    std::atomic<int> m_inEvaluate { 0 };
};

} // namespace kl::testonly
