// TEST DOUBLE for CI, never installed and never used by the product: kl_test_fake_worker speaks the real
// kloop-worker protocol (JSON lines, kernels/worker_protocol.h, the wire forms of core/json_io.h) on a
// machine without a GPU, so `kloop run` can be driven end to end as a process (KL_WORKER points at it).
//
// Real here: the protocol and its JSON forms; NVRTC compiles (op compile, and verify/time when a request
// carries no CUBIN), so compile errors and register counts are the compiler's; verify/time refuse a CUBIN
// that is not an ELF image holding every kernel the launch plan names.
//
// Modelled here, because nothing runs (the rules are deterministic so tests can rely on them):
//   hello   an obviously fake device, "test double (no GPU)", sm_90a so NVRTC targets a real architecture; its
//           uuid is "GPU-test-double-" + CUDA_VISIBLE_DEVICES (so local:N workers are told apart) or
//           KL_FAKE_WORKER_UUID; KL_FAKE_WORKER_DEVICE renames the model (a pool of two GPU models);
//           KL_FAKE_WORKER_PROTOCOL poses as a worker of another protocol version (the mismatch test).
//   verify  every shape is correct (rel L2 1e-3) unless the source contains the marker
//           "kl-test-double: wrong-results"; then every check fails with rel L2 0.5, above any tolerance.
//   time    latency(shape) = 0.5 us + bytes(shape) / (4 TB/s * efficiency), bytes from the problem's formula.
//           efficiency: 0.30 for the problem's own baseline source (the naive kernel); the E of a
//           "kl-test-double: efficiency=E" marker in the source; otherwise 0.45 + 0.40 * u with u in [0, 1)
//           from an FNV-1a hash of the source and the parameter values. The median's 95% CI is +-0.2% and
//           p10/p90 +-0.5%, so two candidates whose efficiencies differ by more than about 1% are told apart
//           and equal ones are not (the loop's "CI excludes 1.0" rule is exercised both ways).
//           The marker "kl-test-double: throttle=R" reports NVML clocks event reasons R (a decimal bitmask, e.g.
//           4 for the sustained power cap, 32 for a thermal slowdown) before and during every timed shape.
//           The marker "kl-test-double: time-sleep-ms=N" makes the time op take N ms of wall time (a long
//           measurement, so tests can kill -9 a worker in the middle of one); with KL_FAKE_WORKER_BUSY_FILE set,
//           the double writes its pid to that file as such a time op begins.
//   trace   refused: there are no kernel records without a GPU.
//   profile (kloop profile --sol) for the baseline, then the candidate: `launches` runs of the plan's kernels (the
//           @kl:launch kernels, named by the CUBIN symbols the request lowers them to), each run lasting the time
//           op's median for that plan on that shape, split evenly over its kernels, so baseline/candidate of the
//           profile equals the time op's speedup. Records start at 1e12 ns, a kernel 1 us after the one before and
//           a run 10 us after the last; grid/block are the launch line's for the shape and parameters; event_us is
//           a run's kernel time + 2 us. Counters (unless the request says "sol": false: "not requested"), one
//           per kernel: DRAM % = its share of bytes(shape) / its time over 4 TB/s, SM % 25, achieved occupancy
//           80 %, 1 pass. The marker "kl-test-double: no-counters" in the candidate source makes both plans'
//           counters unavailable with a note naming it (as a worker without counter permission: records stay).
#include "core/errors.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "kernels/nvrtc_compiler.h"
#include "kernels/plan_profile.h"
#include "kernels/worker_protocol.h"
#include "kernels/worker_serve.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>

namespace {

using kl::wire::Json;

constexpr const char* kWrongResultsMarker = "kl-test-double: wrong-results";
constexpr const char* kEfficiencyMarker = "kl-test-double: efficiency=";
constexpr const char* kNoCountersMarker = "kl-test-double: no-counters";
constexpr const char* kTimeSleepMarker = "kl-test-double: time-sleep-ms=";
constexpr const char* kThrottleMarker = "kl-test-double: throttle=";
constexpr double kBandwidthBytesPerSecond = 4.0e12;
constexpr double kLaunchOverheadUs = 0.5;
constexpr double kBaselineEfficiency = 0.30;
constexpr double kGraphThresholdUs = 20.0; // EvaluateOptions::graphThresholdUs
constexpr std::uint64_t kTraceStartNs = 1'000'000'000'000ull;
constexpr std::uint64_t kKernelGapNs = 1'000;
constexpr std::uint64_t kRunGapNs = 10'000;
constexpr double kEventOverheadUs = 2.0;
constexpr double kSmThroughputPct = 25.0;
constexpr double kAchievedOccupancyPct = 80.0;

kl::DeviceInfo fakeDevice()
{
    kl::DeviceInfo d;
    d.name = "test double (no GPU)";
    d.ccMajor = 9;
    d.ccMinor = 0;
    d.arch = "sm_90a";
    d.smCount = 132;
    d.l2Bytes = 50 * 1024 * 1024;
    d.sharedPerBlock = 48 * 1024;
    d.sharedPerBlockOptin = 227 * 1024;
    d.sharedPerSm = 228 * 1024;
    d.regsPerBlock = 65536;
    d.regsPerSm = 65536;
    d.maxThreadsPerBlock = 1024;
    d.maxThreadsPerSm = 2048;
    d.globalMemBytes = 1ll << 30;
    d.driverVersion = "none (test double)";
    d.cudaDriverApi = "none (test double)";
    d.nvrtcVersion = kl::nvrtcVersionString();
    if (const char* name = std::getenv("KL_FAKE_WORKER_DEVICE"); name && *name)
        d.name = name;
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    d.uuid = std::string("GPU-test-double-") + (visible && *visible ? visible : "0");
    if (const char* uuid = std::getenv("KL_FAKE_WORKER_UUID"); uuid && *uuid)
        d.uuid = uuid;
    // KL_FAKE_WORKER_ARCH=sm_86: the double poses as an older card, for the architecture refusals' tests.
    if (const char* arch = std::getenv("KL_FAKE_WORKER_ARCH"); arch && kl::archNumber(arch)) {
        d.ccMajor = *kl::archNumber(arch) / 10;
        d.ccMinor = *kl::archNumber(arch) % 10;
        d.arch = arch;
    }
    return d;
}

std::uint64_t fnv1a(const std::string& s, std::uint64_t h = 1469598103934665603ull)
{
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

struct LoadedProblem {
    kl::Problem problem;
    std::string baselineSource;
};

using CandidateRequest = kl::wire::CandidateWire;

class FakeWorker final : public kl::wire::WorkerHandler {
public:
    kl::wire::HelloReply hello(const kl::wire::HelloRequest&) override
    {
        kl::wire::HelloReply r;
        r.protocol = kl::wire::kProtocolVersion;
        if (const char* p = std::getenv("KL_FAKE_WORKER_PROTOCOL"); p && *p)
            r.protocol = std::atoi(p);
        r.workerVersion = kl::wire::softwareVersion();
        r.device = m_device;
        r.pid = static_cast<long>(::getpid());
        r.host = "test-double";
        r.testDouble = true;
        return r;
    }

    kl::wire::SampleReply sample(const kl::wire::SampleRequest&) override { return {}; }

    kl::wire::LoadProblemReply loadProblem(const kl::wire::LoadProblemRequest& req) override
    {
        LoadedProblem lp;
        lp.problem = req.problem;
        lp.baselineSource = req.baselineSource;
        kl::wire::LoadProblemReply r;
        r.problem = lp.problem.name;
        r.baselineKind = "source";
        m_problems[lp.problem.name] = std::move(lp);
        return r;
    }

    kl::wire::CompileReply compile(const kl::wire::CompileRequest& req) override
    {
        const auto module = compile(req.candidate);
        return { module->report, module->key };
    }

    kl::wire::VerifyReply verify(const kl::wire::VerifyRequest& req) override
    {
        (void)problemOf(req.problem);
        kl::wire::VerifyReply r;
        if (!loadable(req.candidate, &r.compile))
            return r; // as the real worker: no plan, no shapes
        r.ran = true;
        const bool wrong = req.candidate.source.find(kWrongResultsMarker) != std::string::npos;
        for (std::size_t i = 0; i < req.shapes.size(); ++i) {
            kl::ShapeResult s;
            s.shape = req.shapes[i];
            s.heldOut = i < req.heldOut.size() && req.heldOut[i];
            kl::CorrectnessStats check;
            check.distribution = "normal";
            check.seed = req.seed;
            check.relL2 = wrong ? 0.5 : 1e-3;
            check.maxAbs = wrong ? 1.0 : 4e-3;
            check.passed = !wrong;
            s.checks.push_back(check);
            s.correct = check.passed;
            r.shapes.push_back(std::move(s));
        }
        return r;
    }

    kl::wire::TimeReply time(const kl::wire::TimeRequest& req) override
    {
        const LoadedProblem& lp = problemOf(req.problem);
        kl::wire::TimeReply r;
        if (!loadable(req.candidate, &r.compile))
            return r;
        r.ran = true;
        sleepIfAsked(req.candidate.source);
        const double eff = efficiency(lp, req.candidate);
        for (const kl::Shape& shape : req.shapes) {
            kl::wire::TimedShape t;
            t.result.shape = shape;
            t.result.correct = true;
            const int samples = std::min(50, req.maxSamples); // as the real worker: never past max_samples
            t.result.timing = timing(latencyUs(lp, shape, eff), samples);
            // The real worker's rule (engine_time.cpp): graph replays always, never, or under 20 us.
            const double fastest = std::min(latencyUs(lp, shape, eff), latencyUs(lp, shape, kBaselineEfficiency));
            t.result.timing->graphMode
                = req.graphMode == "always" || (req.graphMode == "auto" && fastest < kGraphThresholdUs);
            if (req.baseline) {
                t.result.baselineTiming = timing(latencyUs(lp, shape, kBaselineEfficiency), samples);
                t.result.baselineTiming->graphMode = t.result.timing->graphMode;
                t.result.speedup = t.result.baselineTiming->medianUs / t.result.timing->medianUs;
                t.result.speedupCiLow = t.result.baselineTiming->ciLowUs / t.result.timing->ciHighUs;
                t.result.speedupCiHigh = t.result.baselineTiming->ciHighUs / t.result.timing->ciLowUs;
            }
            t.inputSets = 1;
            if (const std::uint64_t reasons = throttleReasons(req.candidate.source)) {
                for (kl::DeviceSample* d : { &t.before, &t.after }) {
                    d->available = true;
                    d->throttleReasons = reasons;
                    d->throttleText = kl::throttleText(reasons);
                }
                t.throttled = t.after.throttled();
            }
            r.shapes.push_back(std::move(t));
        }
        return r;
    }

    kl::wire::TraceReply trace(const kl::wire::TraceRequest&) override
    {
        throw kl::InputError("the test double runs no kernels, so it has no kernel records to trace");
    }

    kl::wire::ProfileOpReply profile(const kl::wire::ProfileOpRequest& req) override
    {
        const LoadedProblem& lp = problemOf(req.problem);
        kl::wire::ProfileOpReply r;
        if (!loadable(req.candidate, &r.compile))
            return r;
        r.report = profile(lp, req.candidate, r.compile, req);
        return r;
    }

private:
    const LoadedProblem& problemOf(const std::string& name) const
    {
        const auto it = m_problems.find(name);
        if (it == m_problems.end())
            throw kl::InputError("problem '" + name + "' is not loaded (send load_problem first)");
        return it->second;
    }

    static std::uint64_t throttleReasons(const std::string& source)
    {
        const auto at = source.find(kThrottleMarker);
        return at == std::string::npos ? 0 : std::stoull(source.substr(at + std::string(kThrottleMarker).size()));
    }

    static void sleepIfAsked(const std::string& source)
    {
        const auto at = source.find(kTimeSleepMarker);
        if (at == std::string::npos)
            return;
        const long ms = std::strtol(source.c_str() + at + std::string(kTimeSleepMarker).size(), nullptr, 10);
        if (const char* busy = std::getenv("KL_FAKE_WORKER_BUSY_FILE"); busy && *busy) {
            const std::string tmp = std::string(busy) + ".tmp";
            if (std::FILE* f = std::fopen(tmp.c_str(), "w")) {
                std::fprintf(f, "%ld\n", static_cast<long>(::getpid()));
                std::fclose(f);
                std::rename(tmp.c_str(), busy); // whole or not at all: the test reads it as soon as it appears
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp(ms, 0L, 600'000L)));
    }

    std::shared_ptr<const kl::CompiledModule> compile(const CandidateRequest& c)
    {
        kl::CompileJob job;
        job.source = c.source;
        job.params = c.params;
        job.arch = m_device.arch;
        try {
            const kl::KernelSpec spec = kl::parseKernelSpec(c.source);
            for (const auto& l : spec.launches)
                job.kernels.push_back(l.kernel);
            for (const auto& p : spec.params)
                job.params.emplace(p.name, p.defaultValue);
        } catch (const kl::InputError& e) {
            auto failed = std::make_shared<kl::CompiledModule>();
            failed->report.log = std::string("annotations: ") + e.what();
            return failed;
        }
        auto module = m_compiler.compile(job);
        if (module->report.ok)
            m_modules[module->key] = module;
        return module;
    }

    // The real worker loads the CUBIN it is sent; the double checks that it is one and names the kernels.
    bool loadable(const CandidateRequest& c, kl::CompileReport* report)
    {
        if (!c.cubin) {
            const auto cached = m_modules.find(c.key);
            const auto module = cached != m_modules.end() ? cached->second : compile(c);
            *report = module->report;
            return module->report.ok;
        }
        report->ok = true;
        report->cacheHit = true;
        if (c.cubin->size() < 4
            || c.cubin->compare(0, 4,
                   "\x7f"
                   "ELF")
                != 0)
            throw kl::InputError("candidate CUBIN is not an ELF image");
        for (const auto& [planned, symbol] : c.lowered)
            if (c.cubin->find(symbol) == std::string::npos)
                throw kl::InputError("kernel '" + planned + "' (" + symbol + ") is not in the CUBIN");
        return true;
    }

    double latencyUs(const LoadedProblem& lp, const kl::Shape& shape, double eff) const
    {
        const double bytes = lp.problem.bytes.empty() ? 0.0 : lp.problem.bytes.evaluate(shape.bindings());
        return kLaunchOverheadUs + bytes / (kBandwidthBytesPerSecond * eff) * 1e6;
    }

    double efficiency(const LoadedProblem& lp, const CandidateRequest& c) const
    {
        if (c.source == lp.baselineSource)
            return kBaselineEfficiency;
        if (const auto at = c.source.find(kEfficiencyMarker); at != std::string::npos) {
            try {
                const double e = std::stod(c.source.substr(at + std::string(kEfficiencyMarker).size()));
                if (e > 0 && e <= 1)
                    return e;
            } catch (const std::exception&) {
            }
            throw kl::InputError("the test double's efficiency marker wants a number in (0, 1]");
        }
        std::uint64_t h = fnv1a(c.source);
        for (const auto& [name, value] : c.params)
            h = fnv1a(name + "=" + std::to_string(value) + ";", h);
        const double u = static_cast<double>(h >> 11) / static_cast<double>(1ull << 53);
        return 0.45 + 0.40 * u;
    }

    static kl::TimingStats timing(double us, int samples = 50)
    {
        kl::TimingStats t;
        t.medianUs = us;
        t.ciLowUs = us * 0.998;
        t.ciHighUs = us * 1.002;
        t.p10Us = us * 0.995;
        t.p90Us = us * 1.005;
        t.samples = samples;
        t.inputSets = 1;
        return t;
    }

    // One modelled profiled plan: its kernels from the @kl:launch lines, its run time from the timing model.
    kl::PlanProfile profilePlan(const LoadedProblem& lp, const std::string& role, const std::string& label,
        const std::string& source, const kl::ParamValues& requestParams,
        const std::map<std::string, std::string>& lowered, double eff, const kl::Shape& shape, int launches, bool trace,
        bool sol, const std::string& solUnavailable, std::uint64_t* clockNs) const
    {
        const kl::KernelSpec spec = kl::parseKernelSpec(source);
        if (spec.launches.empty())
            throw kl::InputError(role + " source has no @kl:launch line");
        kl::ParamValues params = spec.defaults();
        for (const auto& [k, v] : requestParams)
            params[k] = v;
        const kl::Bindings b = kl::bindingsFor(params, shape.bindings());
        const double runUs = latencyUs(lp, shape, eff);
        const double bytes = lp.problem.bytes.empty() ? 0.0 : lp.problem.bytes.evaluate(shape.bindings());
        const auto kernels = static_cast<double>(spec.launches.size());
        const auto kernelNs = static_cast<std::uint64_t>(std::llround(runUs / kernels * 1e3));

        kl::PlanProfile pp;
        pp.role = role;
        pp.label = label;
        pp.launches = launches;
        std::uint32_t correlation = 1;
        for (int run = 0; run < launches; ++run) {
            for (const auto& step : spec.launches) {
                kl::KernelRecord k;
                const auto sym = lowered.find(step.kernel);
                k.name = sym != lowered.end() ? sym->second : step.kernel;
                k.startNs = *clockNs;
                k.endNs = k.startNs + kernelNs;
                *clockNs = k.endNs + kKernelGapNs;
                for (int i = 0; i < 3; ++i) {
                    try {
                        k.grid[i] = static_cast<int>(step.grid[i].evaluateInt(b));
                        k.block[i] = static_cast<int>(step.block[i].evaluateInt(b));
                    } catch (const std::exception&) {
                        k.grid[i] = k.block[i] = 1; // an axis the launch line leaves out
                    }
                }
                k.registers = 32;
                k.stream = 7;
                k.correlation = correlation++;
                if (trace)
                    pp.records.push_back(std::move(k));
            }
            pp.eventUs.push_back(static_cast<double>(kernelNs) * kernels / 1e3 + kEventOverheadUs);
            *clockNs += kRunGapNs;
        }
        if (trace)
            pp.kernelsPerRun = static_cast<int>(spec.launches.size());
        if (!sol) {
            pp.solNote = "not requested";
        } else if (!solUnavailable.empty()) {
            pp.solNote = solUnavailable;
        } else {
            pp.solAvailable = true;
            pp.solPasses = 1;
            for (const auto& step : spec.launches) {
                kl::SolCounters ks;
                const auto sym = lowered.find(step.kernel);
                ks.name = sym != lowered.end() ? sym->second : step.kernel;
                ks.durationNs = static_cast<double>(kernelNs);
                ks.dramBytes = bytes / kernels;
                ks.dramThroughputPct = ks.dramBytes / (ks.durationNs * 1e-9) / kBandwidthBytesPerSecond * 100.0;
                ks.smThroughputPct = kSmThroughputPct;
                ks.achievedOccupancyPct = kAchievedOccupancyPct;
                pp.sol.push_back(std::move(ks));
            }
        }
        return pp;
    }

    kl::ProfileReport profile(const LoadedProblem& lp, const CandidateRequest& c, const kl::CompileReport& report,
        const kl::wire::ProfileOpRequest& req) const
    {
        kl::ProfileReport pr;
        pr.shape = req.shape;
        if (std::string why; !lp.problem.shapeIsValid(pr.shape, &why))
            throw kl::InputError("shape " + pr.shape.label() + " does not fit problem " + lp.problem.name + ": " + why);
        pr.compile = report;
        const bool sol = req.sol;
        const bool trace = req.trace;
        const int launches = std::clamp(req.launches, 1, 1000);
        pr.traceAvailable = trace;
        pr.traceNote = trace ? "" : "not requested";
        const std::string noCounters = c.source.find(kNoCountersMarker) != std::string::npos
            ? std::string("the test double models a worker without performance counters (\"") + kNoCountersMarker
                + "\" in the candidate source)"
            : std::string();
        std::uint64_t clockNs = kTraceStartNs;
        pr.plans.push_back(profilePlan(lp, "baseline", "baseline.cu", lp.baselineSource, {}, {}, kBaselineEfficiency,
            pr.shape, launches, trace, sol, noCounters, &clockNs));
        pr.plans.push_back(profilePlan(lp, "candidate", "candidate", c.source, c.params, c.lowered, efficiency(lp, c),
            pr.shape, launches, trace, sol, noCounters, &clockNs));
        return pr;
    }

    kl::DeviceInfo m_device = fakeDevice();
    kl::NvrtcCompiler m_compiler { std::filesystem::path(), 1 }; // memory cache only
    std::map<std::string, LoadedProblem> m_problems;
    std::map<std::string, std::shared_ptr<const kl::CompiledModule>> m_modules;
};

} // namespace

int main()
{
    FakeWorker worker;
    return kl::wire::serveWorker(worker, stdout);
}
