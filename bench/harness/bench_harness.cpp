// bench_harness: what issue 3 asks the harness to prove on the GPU, in one run:
//   1. evaluations per minute (compile + verify + time) over a sweep of rmsnorm template configurations;
//   2. repeatability: one kernel timed in 10 separate evaluations (spread of the medians);
//   3. agreement of our event timings with CUPTI's kernel records for the same launches;
//   4. each problem's baseline and best template configuration vs PyTorch eager and the copy roofline;
//   5. with --cute-configs N: the sweep rate of N configurations of a CuTe candidate (bench/hopper/cute_gemm.cu)
//      over gemm_bf16, with NVRTC's compile time per candidate (CuTe's headers make it the rate's limit).
// Usage: bench_harness --out DIR [--configs N] [--torch torch.json] [--problem-configs N] [--gemm-configs N]
//        [--cute-configs N]   (--configs 0 skips the rmsnorm sweep; its default config is then the one timed)
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/session_store.h"
#include "kernels/gpu_evaluator.h"
#include "kernels/stats.h"
#include "kernels/worker_protocol.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

double seconds()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string fmt(double v, int prec = 3)
{
    char b[64];
    std::snprintf(b, sizeof(b), "%.*f", prec, v);
    return b;
}

std::string paramsText(const kl::ParamValues& p)
{
    std::string s;
    for (const auto& [k, v] : p)
        s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
    return s;
}

kl::Problem problem(const std::string& name)
{
    return kl::loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/" + name);
}

struct SweepResult {
    int evaluated = 0;
    int correct = 0;
    int rejected = 0;
    int compileFailed = 0;
    int crashed = 0;
    double wallSeconds = 0;
    double compileWallSeconds = 0;
    double compileWaitSeconds = 0; // the evaluation loop waiting for a compile: 0 when the GPU side sets the rate
    double deviceSeconds = 0; // the evaluations' time on the worker (verification and timing)
    kl::ParamValues best;
    double bestObjective = 0;
    std::map<std::string, int> rules;
    // Fastest candidate median per tuning shape across the sweep, and its configuration: the dispatcher's view
    // (a configuration wins only in the shapes where it was verified and timed best).
    std::map<std::string, std::pair<double, kl::ParamValues>> bestPerShape;
    std::vector<double> compileMs; // NVRTC's time for each candidate the sweep compiled (cache hits left out)
};

// count random configurations of source's space (the evaluator's template unless given), compiled ahead on the
// pool and evaluated one after another.
SweepResult sweep(kl::GpuEvaluator& ev, int count, double maxSecondsPerShape, int heldOut, std::uint64_t seed,
    const std::string& source = {})
{
    SweepResult r;
    const std::string& swept = source.empty() ? ev.templateSource() : source;
    auto space = kl::parseKernelSpec(swept).enumerateSpace();
    std::shuffle(space.begin(), space.end(), std::mt19937_64(seed));
    if (static_cast<int>(space.size()) > count)
        space.resize(count);
    std::vector<kl::Candidate> cands;
    for (std::size_t i = 0; i < space.size(); ++i) {
        cands.push_back(ev.templateCandidate(space[i], "c" + std::to_string(i)));
        cands.back().source = swept;
    }
    kl::EvaluateOptions opt;
    opt.maxSecondsPerShape = maxSecondsPerShape;
    opt.heldOutCount = heldOut;
    // Tuner mode: configurations are ranked by their own medians; the baseline is not re-timed for each one
    // (the finalists are timed interleaved with it below).
    opt.timeBaseline = false;
    ev.device(); // the worker's start is not part of the sweep
    const double t0 = seconds();
    std::vector<std::future<std::shared_ptr<const kl::CompiledModule>>> compiles;
    for (const auto& c : cands)
        compiles.push_back(ev.compileAsync(c)); // the pool compiles ahead while the GPU evaluates
    for (std::size_t i = 0; i < cands.size(); ++i) {
        const double waitStart = seconds();
        const auto module = compiles[i].get();
        r.compileWaitSeconds += seconds() - waitStart;
        if (module && !module->report.cacheHit)
            r.compileMs.push_back(module->report.compileMs);
        if (i + 1 == cands.size())
            r.compileWallSeconds = seconds() - t0;
        const auto e = ev.evaluate(cands[i], opt, kl::CancelToken {});
        r.deviceSeconds += e.deviceMs * 1e-3;
        ++r.evaluated;
        switch (e.verdict) {
        case kl::Verdict::Correct:
        case kl::Verdict::Accepted:
        case kl::Verdict::PendingReview: {
            ++r.correct;
            // Weighted geometric mean of the candidate's medians over the timed shapes: lower is better.
            double logSum = 0, wSum = 0;
            for (const auto& sh : e.shapes)
                if (sh.timing && sh.timing->medianUs > 0) {
                    logSum += sh.shape.weight * std::log(sh.timing->medianUs);
                    wSum += sh.shape.weight;
                }
            const double geo = wSum > 0 ? std::exp(logSum / wSum) : 0;
            if (geo > 0 && (r.bestObjective == 0 || geo < r.bestObjective)) {
                r.bestObjective = geo;
                r.best = cands[i].params;
            }
            break;
        }
        case kl::Verdict::CompileFailed:
            ++r.compileFailed;
            break;
        case kl::Verdict::Crashed:
        case kl::Verdict::TimedOut:
            ++r.crashed;
            break;
        default:
            ++r.rejected;
        }
        for (const auto& reason : e.reasons)
            ++r.rules[reason.rule];
        if (e.correctEverywhere())
            for (const auto& sh : e.shapes)
                if (sh.timing && sh.timing->medianUs > 0) {
                    auto& b = r.bestPerShape[sh.shape.label()];
                    if (b.first == 0 || sh.timing->medianUs < b.first)
                        b = { sh.timing->medianUs, cands[i].params };
                }
    }
    r.wallSeconds = seconds() - t0;
    return r;
}

int g_minSamples = 20;

Json timeRequest(kl::GpuEvaluator& ev, const kl::Candidate& c, const std::vector<kl::Shape>& shapes, bool baseline,
    double maxSeconds, bool samples = false, double targetRelCi = 0.005)
{
    const auto m = ev.compileModule(c);
    if (!m->report.ok)
        throw std::runtime_error("compile failed: " + m->report.log);
    ev.prepareWorker(); // with --repeat-only no evaluation has loaded the problem yet
    Json sh = Json::array();
    for (const auto& s : shapes)
        sh.push_back({ { "dims", s.dims } });
    const auto r = ev.client().request(
        { { "op", "time" }, { "problem", ev.problem().name }, { "candidate", ev.candidateRequest(c, *m) },
            { "shapes", sh }, { "baseline", baseline }, { "max_seconds_per_shape", maxSeconds },
            { "target_rel_ci", targetRelCi }, { "min_samples", g_minSamples }, { "return_samples", samples },
            { "seed", std::random_device {}() } },
        maxSeconds * 4 * static_cast<double>(shapes.size()) + 60);
    if (!r.ok())
        throw std::runtime_error("time request failed: " + r.error);
    return r.body;
}

} // namespace

int main(int argc, char** argv)
{
    fs::path out = "bench-harness-out";
    int configs = 240;
    int problemConfigs = 40;
    int gemmConfigs = 10;
    int cuteConfigs = 0;
    std::string torchFile;
    std::string repeatOnly; // "K=V,K=V": skip the sweep, measure repeatability and CUPTI agreement of this config
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
        if (a == "--out")
            out = next();
        else if (a == "--configs")
            configs = std::stoi(next());
        else if (a == "--problem-configs")
            problemConfigs = std::stoi(next());
        else if (a == "--gemm-configs")
            gemmConfigs = std::stoi(next());
        else if (a == "--cute-configs")
            cuteConfigs = std::stoi(next());
        else if (a == "--torch")
            torchFile = next();
        else if (a == "--repeat-only")
            repeatOnly = next();
        else if (a == "--min-samples")
            g_minSamples = std::stoi(next());
        else {
            std::fprintf(stderr,
                "usage: bench_harness --out DIR [--configs N] [--problem-configs N] [--gemm-configs N] "
                "[--cute-configs N] [--torch FILE] [--repeat-only K=V,K=V]\n");
            return 2;
        }
    }
    fs::create_directories(out);
    Json torch = Json::object();
    if (!torchFile.empty() && fs::exists(torchFile)) {
        std::ifstream in(torchFile);
        torch = Json::parse(in, nullptr, false);
        if (torch.is_discarded())
            torch = Json::object();
    }

    kl::GpuEvaluatorOptions o;
    o.compileCacheDir = out / "cubin-cache";
    fs::remove_all(o.compileCacheDir); // a cold cache: every sweep compile is real
    o.worker.stderrPath = (out / "worker-stderr.log").string();
    Json results;
    std::ostringstream md;
    std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));

    // Written after every section, so a run cut short still leaves what it measured.
    auto flush = [&]() {
        std::ofstream(out / "results.json") << results.dump(1);
        std::ofstream(out / "summary.md") << md.str();
    };
    kl::GpuEvaluator rms(problem("rmsnorm"), o);
    const kl::DeviceInfo dev = rms.device();
    results["device"] = kl::wire::toJson(dev);
    results["date"] = date;
    const double copyBw = dev.measuredCopyBandwidth;
    md << "# bench/harness on " << dev.name << "\n\n"
       << "date " << date << "; driver " << dev.driverVersion << "; CUDA driver API " << dev.cudaDriverApi
       << "; toolkit " << dev.cudaRuntime << "; NVRTC " << dev.nvrtcVersion << "; arch " << dev.arch << "; "
       << dev.smCount << " SMs; L2 " << dev.l2Bytes / (1 << 20) << " MiB; measured copy bandwidth "
       << fmt(copyBw / 1e12, 2) << " TB/s (read+write)\n\n";
    std::printf("device: %s arch %s copy %.2f TB/s driver %s\n", dev.name.c_str(), dev.arch.c_str(), copyBw / 1e12,
        dev.driverVersion.c_str());

    // 1. Sweep throughput.
    SweepResult sw;
    if (!repeatOnly.empty()) {
        std::istringstream in(repeatOnly);
        for (std::string kv; std::getline(in, kv, ',');)
            if (const auto eq = kv.find('='); eq != std::string::npos)
                sw.best[kv.substr(0, eq)] = std::stoll(kv.substr(eq + 1));
    } else if (configs > 0) {
        sw = sweep(rms, configs, 0.03, 2, 42);
    }
    if (repeatOnly.empty() && configs > 0) {
        const double perMin = sw.wallSeconds > 0 ? sw.evaluated / (sw.wallSeconds / 60.0) : 0;
        results["sweep"] = { { "configs", sw.evaluated }, { "correct", sw.correct }, { "rejected", sw.rejected },
            { "compile_failed", sw.compileFailed }, { "crashed_or_timeout", sw.crashed }, { "wall_s", sw.wallSeconds },
            { "compile_wall_s", sw.compileWallSeconds }, { "compile_wait_s", sw.compileWaitSeconds },
            { "device_s", sw.deviceSeconds }, { "evals_per_min", perMin }, { "best_params", kl::wire::toJson(sw.best) },
            { "best_objective", sw.bestObjective }, { "compile_threads", rms.compiler().threads() },
            { "rules", sw.rules } };
        std::printf("sweep: %d rmsnorm configs in %.1f s = %.0f evaluations/min (waited %.1f s for compiles, %.1f s on "
                    "the worker); correct %d; best %s (geomean %.2f us)\n",
            sw.evaluated, sw.wallSeconds, perMin, sw.compileWaitSeconds, sw.deviceSeconds, sw.correct,
            paramsText(sw.best).c_str(), sw.bestObjective);
        std::fflush(stdout);
        md << "## Sweep throughput (compile + verify + time)\n\n"
           << sw.evaluated << " rmsnorm template configurations, cold compile cache, " << rms.compiler().threads()
           << " compile threads; each evaluation verifies " << rms.problem().verifyShapes.size() << " verify + "
           << rms.problem().tuningShapes.size() << " tuning shapes + the range extremes + 2 random held-out shapes "
           << "(5 checks + graph replay each, the order checks + graph replay on shapes over 1 GiB; CUPTI on) and "
              "times the "
           << rms.problem().tuningShapes.size()
           << " tuning shapes (adaptive to a 1% CI, <= 30 ms per shape, timed outputs re-checked). Tuner mode: "
           << "configurations are ranked by their own medians (EvaluateOptions::timeBaseline = false); the winners "
           << "are timed interleaved with the baseline in the problem table below.\n\n"
           << "| evaluations | wall s | evaluations/min | on the worker s | waiting for compiles s | correct | "
              "rejected "
              "| compile failed | crashed/hung |\n|---|---|---|---|---|---|---|---|---|\n"
           << "| " << sw.evaluated << " | " << fmt(sw.wallSeconds, 1) << " | " << fmt(perMin, 0) << " | "
           << fmt(sw.deviceSeconds, 1) << " | " << fmt(sw.compileWaitSeconds, 1) << " | " << sw.correct << " | "
           << sw.rejected << " | " << sw.compileFailed << " | " << sw.crashed << " |\n\n"
           << "best: " << paramsText(sw.best) << " (geometric mean of its medians over the tuning shapes "
           << fmt(sw.bestObjective, 2) << " us)\n\n";
    }
    flush();

    // 5, run second so that it does not wait behind the rest: the sweep rate with a CuTe candidate.
    if (cuteConfigs > 0 && repeatOnly.empty() && kl::cutlassIncludeDir().empty()) {
        // Without the headers every candidate would be a compile failure, which is no sweep rate.
        const std::string why = "no CUTLASS headers: run scripts/install-deps (it unpacks the pinned nvidia-cutlass "
                                "wheel into the build tree) or set CUTLASS_HOME";
        std::fprintf(stderr, "cute sweep skipped: %s\n", why.c_str());
        results["cute_sweep"] = { { "error", why } };
        md << "## Sweep throughput with a CuTe candidate (gemm_bf16)\n\nnot measured: " << why << "\n\n";
        flush();
    } else if (cuteConfigs > 0 && repeatOnly.empty()) {
        const std::string cuteFile = "bench/hopper/cute_gemm.cu";
        const std::string cuteSource = kl::readFile(fs::path(KL_SOURCE_DIR) / cuteFile);
        kl::GpuEvaluator gemm(problem("gemm_bf16"), o);
        const SweepResult cs = sweep(gemm, cuteConfigs, 0.03, 1, 11, cuteSource);
        const double perMin = cs.wallSeconds > 0 ? cs.evaluated / (cs.wallSeconds / 60.0) : 0;
        const auto& ms = cs.compileMs;
        double meanMs = 0;
        for (const double v : ms)
            meanMs += v / static_cast<double>(ms.size());
        const double medianMs = ms.empty() ? 0 : kl::percentile(ms, 0.5);
        const double maxMs = ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end());
        Json cute = { { "source", cuteFile }, { "configs", cs.evaluated },
            { "space", kl::parseKernelSpec(cuteSource).spaceSize() }, { "correct", cs.correct },
            { "rejected", cs.rejected }, { "compile_failed", cs.compileFailed }, { "crashed_or_timeout", cs.crashed },
            { "wall_s", cs.wallSeconds }, { "compile_wall_s", cs.compileWallSeconds },
            { "compile_wait_s", cs.compileWaitSeconds }, { "device_s", cs.deviceSeconds }, { "evals_per_min", perMin },
            { "compile_ms", ms }, { "compile_ms_mean", meanMs }, { "compile_ms_median", medianMs },
            { "compile_ms_max", maxMs }, { "compile_threads", gemm.compiler().threads() },
            { "best_params", kl::wire::toJson(cs.best) }, { "best_objective", cs.bestObjective },
            { "rules", cs.rules } };
        std::printf("cute sweep: %d gemm_bf16 configs of %s in %.1f s = %.1f evaluations/min (waited %.1f s for "
                    "compiles); NVRTC compile ms per candidate mean %.0f median %.0f max %.0f (%u threads); correct "
                    "%d, rejected %d, compile failed %d; best %s (geomean %.2f us)\n",
            cs.evaluated, cuteFile.c_str(), cs.wallSeconds, perMin, cs.compileWaitSeconds, meanMs, medianMs, maxMs,
            gemm.compiler().threads(), cs.correct, cs.rejected, cs.compileFailed, paramsText(cs.best).c_str(),
            cs.bestObjective);
        md << "## Sweep throughput with a CuTe candidate (gemm_bf16)\n\n"
           << cs.evaluated << " random configurations of `" << cuteFile
           << "` (CuTe TiledMMA mma.sync m16n8k16 + cp.async + ldmatrix, multi-stage) over gemm_bf16, cold compile "
              "cache, "
           << gemm.compiler().threads() << " compile threads; each evaluation verifies the verify + tuning shapes, "
           << "the range extremes and 1 random held-out shape, and times the tuning shapes (<= 30 ms each).\n\n"
           << "| evaluations | wall s | evaluations/min | waiting for compiles s | NVRTC compile ms mean | median | "
              "max | correct | rejected | compile failed | crashed/hung "
              "|\n|---|---|---|---|---|---|---|---|---|---|---|\n"
           << "| " << cs.evaluated << " | " << fmt(cs.wallSeconds, 1) << " | " << fmt(perMin, 1) << " | "
           << fmt(cs.compileWaitSeconds, 1) << " | " << fmt(meanMs, 0) << " | " << fmt(medianMs, 0) << " | "
           << fmt(maxMs, 0) << " | " << cs.correct << " | " << cs.rejected << " | " << cs.compileFailed << " | "
           << cs.crashed << " |\n\n";
        if (!cs.best.empty()) {
            // The winner timed interleaved with cuBLAS at every tuning shape.
            kl::Candidate best = gemm.templateCandidate(cs.best, "best-cute");
            best.source = cuteSource;
            const Json tc = timeRequest(gemm, best, gemm.problem().tuningShapes, true, 1.0);
            Json rows = Json::array();
            double logSpeedup = 0;
            md << "best: " << paramsText(cs.best) << "\n\n| shape | CuTe us | cuBLAS us | vs cuBLAS | TFLOP/s |\n"
               << "|---|---|---|---|---|\n";
            for (std::size_t i = 0; i < gemm.problem().tuningShapes.size(); ++i) {
                const auto& shape = gemm.problem().tuningShapes[i];
                const Json& s = tc.at("shapes").at(i);
                const double us = s.at("timing").at("median_us").get<double>();
                const double baseUs = s.at("baseline_timing").at("median_us").get<double>();
                const double tflops = gemm.problem().flops.evaluate(shape.bindings()) / (us * 1e-6) / 1e12;
                logSpeedup += std::log(baseUs / us);
                rows.push_back({ { "shape", shape.label() }, { "cute_us", us }, { "cublas_us", baseUs },
                    { "vs_cublas", baseUs / us }, { "tflops", tflops } });
                md << "| " << shape.label() << " | " << fmt(us, 1) << " | " << fmt(baseUs, 1) << " | "
                   << fmt(baseUs / us, 2) << "x | " << fmt(tflops, 0) << " |\n";
            }
            const double geomean = std::exp(logSpeedup / static_cast<double>(rows.size()));
            cute["best_vs_cublas"] = rows;
            cute["best_geomean_vs_cublas"] = geomean;
            md << "\ngeometric mean vs cuBLAS: **" << fmt(geomean, 2) << "x**\n\n";
            std::printf(
                "cute best %s: geomean %.2fx cuBLAS over the tuning shapes\n", paramsText(cs.best).c_str(), geomean);
        }
        results["cute_sweep"] = cute;
        flush();
        std::fflush(stdout);
    }

    const kl::Candidate best = rms.templateCandidate(sw.best.empty() ? kl::ParamValues {} : sw.best, "best");
    // 2. Repeatability: 10 separate evaluations of one kernel's timing (> 50 us).
    kl::Shape big;
    big.dims = { { "T", 16384 }, { "H", 8192 } };
    // Ten medians whose own 95% intervals are +-0.5% spread over about 0.8% by chance alone, so the spread is also
    // reported at +-0.25%: what the instrument gives when asked for the precision a 1% comparison needs.
    std::vector<double> medians;
    md << "## Repeatability\n\n";
    for (const double target : { 0.005, 0.0025 }) {
        medians.clear();
        for (int i = 0; i < 10; ++i) {
            const Json r = timeRequest(rms, best, { big }, false, 2.0, false, target);
            medians.push_back(r.at("shapes").at(0).at("timing").at("median_us").get<double>());
        }
        const double mMin = *std::min_element(medians.begin(), medians.end());
        const double mMax = *std::max_element(medians.begin(), medians.end());
        const double mMed = kl::percentile(medians, 0.5);
        const double spread = (mMax - mMin) / mMed;
        results[target == 0.005 ? "repeatability" : "repeatability_ci_0.25pct"] = { { "shape", big.label() },
            { "medians_us", medians }, { "spread", spread }, { "target_rel_ci", target } };
        std::printf("repeatability (CI +-%.2f%%): %s medians %.2f..%.2f us, spread %.2f%%\n", target * 100,
            big.label().c_str(), mMin, mMax, spread * 100);
        md << "best rmsnorm config (" << paramsText(best.params) << ") at " << big.label()
           << ", 10 separate timing requests, each to a 95% CI of +-" << fmt(target * 100, 2) << "%: medians "
           << fmt(mMin, 2) << " .. " << fmt(mMax, 2) << " us, spread (max-min)/median = **" << fmt(spread * 100, 2)
           << "%** (target < 1% for kernels over 50 us)\n\n";
        flush();
    }

    // 3. CUPTI agreement.
    {
        const auto m = rms.compileModule(best);
        const auto r = rms.client().request(
            { { "op", "trace" }, { "problem", "rmsnorm" }, { "candidate", rms.candidateRequest(best, *m) },
                { "shape", { { "dims", big.dims } } }, { "launches", 200 } },
            120);
        if (r.ok() && r.body.value("cupti", false)) {
            std::vector<double> ev = r.body.at("event_us").get<std::vector<double>>(), cu;
            for (const auto& rec : r.body.at("records"))
                if (rec.at("name").get<std::string>() == "rmsnorm_template")
                    cu.push_back((rec.at("end_ns").get<double>() - rec.at("start_ns").get<double>()) / 1000.0);
            const double e = kl::percentile(ev, 0.5), c = kl::percentile(cu, 0.5);
            // The harness's own number for this kernel (the time op's protocol) against CUPTI's durations.
            const double h = kl::percentile(medians, 0.5);
            const double diff = (h - c) / c;
            const double perLaunchDiff = (e - c) / c;
            results["cupti_agreement"] = { { "harness_median_us", h }, { "cupti_median_us", c },
                { "records", cu.size() }, { "relative_difference", diff }, { "event_per_launch_median_us", e },
                { "event_per_launch_difference", perLaunchDiff } };
            std::printf("cupti: harness %.2f us vs CUPTI %.2f us (%zu records): %+.2f%% (an event pair around every "
                        "launch: %+.2f%%)\n",
                h, c, cu.size(), diff * 100, perLaunchDiff * 100);
            md << "## Harness timing vs CUPTI kernel records\n\n"
               << cu.size() << " launches at " << big.label() << ": harness median " << fmt(h, 2)
               << " us, CUPTI kernel duration median " << fmt(c, 2) << " us: difference **" << fmt(diff * 100, 2)
               << "%** (target within 2%). An event pair around every "
               << "single launch reads " << fmt(e, 2) << " us (" << fmt(perLaunchDiff * 100, 2)
               << "%): the launch bubble an event adds, which is why the harness times a few back-to-back launches per "
               << "event pair.\n\n";
        } else {
            results["cupti_agreement"] = { { "error", r.ok() ? "CUPTI unavailable" : r.error } };
            md << "## Event timing vs CUPTI kernel records\n\nnot measured: "
               << (r.ok() ? "CUPTI unavailable" : r.error) << "\n\n";
        }
    }

    if (!repeatOnly.empty()) {
        flush();
        return 0;
    }

    // 4. Problems: baseline and best template configuration vs PyTorch eager and the copy roofline.
    md << "## Problems vs PyTorch eager and the copy roofline\n\n"
       << "Times are medians of the adaptive protocol (cold L2 by input rotation, CUDA graphs under 20 us; "
       << "PyTorch eager timed with CUDA events per call, also with rotated inputs). "
       << "%copy = (problem bytes / time) / measured copy bandwidth.\n\n"
       << "| problem | shape | baseline us | best template us | PyTorch eager us | PyTorch graph us | template vs "
          "baseline | template vs eager | template vs torch graph | template %copy | best config | per-shape best us "
          "(sweep) |\n"
       << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    Json probs = Json::object();
    for (const std::string name : { "rmsnorm", "softmax", "silu_and_mul", "gemm_bf16" }) {
        std::unique_ptr<kl::GpuEvaluator> own;
        kl::GpuEvaluator* ev = &rms;
        kl::ParamValues bestParams = sw.best;
        std::map<std::string, std::pair<double, kl::ParamValues>> perShape = sw.bestPerShape;
        if (name != "rmsnorm") {
            own = std::make_unique<kl::GpuEvaluator>(problem(name), o);
            ev = own.get();
            const auto s = sweep(*ev, name == "gemm_bf16" ? gemmConfigs : problemConfigs, 0.03, 1, 7);
            bestParams = s.best;
            perShape = s.bestPerShape;
            std::printf("%s: mini-sweep %d configs, %d correct, best %s (geomean %.2f us)\n", name.c_str(), s.evaluated,
                s.correct, paramsText(s.best).c_str(), s.bestObjective);
            std::fflush(stdout);
        }
        const kl::Candidate cand = ev->templateCandidate(bestParams, "best-" + name);
        const kl::Candidate base = ev->baselineCandidate("baseline-" + name);
        const Json tc = timeRequest(*ev, cand, ev->problem().tuningShapes, true, 1.0);
        const bool library = !ev->problem().libraryBaseline.empty();
        Json rows = Json::array();
        for (std::size_t i = 0; i < ev->problem().tuningShapes.size(); ++i) {
            const auto& shape = ev->problem().tuningShapes[i];
            const Json& s = tc.at("shapes").at(i);
            const double candUs = s.at("timing").at("median_us").get<double>();
            const double baseUs = s.at("baseline_timing").at("median_us").get<double>();
            const double bytes = ev->problem().bytes.evaluate(shape.bindings());
            const double flops = ev->problem().flops.evaluate(shape.bindings());
            const double pctCopy = bytes / (candUs * 1e-6) / copyBw;
            double torchUs = 0, torchGraphUs = 0;
            if (torch.contains(name) && torch[name].contains(shape.label())) {
                torchUs = torch[name][shape.label()].value("median_us", 0.0);
                torchGraphUs = torch[name][shape.label()].value("graph_us", 0.0);
            }
            Json row = { { "shape", shape.label() }, { "template_us", candUs }, { "baseline_us", baseUs },
                { "baseline_kind", library ? "library:" + ev->problem().libraryBaseline : "baseline.cu" },
                { "speedup_vs_baseline", s.value("speedup", 0.0) },
                { "speedup_ci", { s.value("speedup_ci_low", 0.0), s.value("speedup_ci_high", 0.0) } },
                { "template_tbps", bytes / (candUs * 1e-6) / 1e12 },
                { "template_tflops", flops / (candUs * 1e-6) / 1e12 }, { "template_pct_copy", pctCopy },
                { "torch_eager_us", torchUs }, { "torch_graph_us", torchGraphUs },
                { "graph_mode", s.at("timing").value("graph_mode", false) },
                { "throttled", s.value("throttled", false) }, { "recheck_correct", s.value("correct", false) },
                { "per_shape_best_us", perShape.count(shape.label()) ? perShape[shape.label()].first : 0.0 },
                { "per_shape_best_params",
                    perShape.count(shape.label()) ? kl::wire::toJson(perShape[shape.label()].second)
                                                  : Json::object() } };
            rows.push_back(row);
            const std::string vsEager = torchUs > 0 ? fmt(torchUs / candUs, 2) + "x" : "n/a";
            const std::string vsGraph = torchGraphUs > 0 ? fmt(torchGraphUs / candUs, 2) + "x" : "n/a";
            const std::string roof = name == "gemm_bf16" ? fmt(flops / (candUs * 1e-6) / 1e12, 0) + " TFLOP/s"
                                                         : fmt(pctCopy * 100, 1) + "%";
            md << "| " << name << " | " << shape.label() << " | " << fmt(baseUs, 1) << (library ? " (cuBLAS)" : "")
               << " | " << fmt(candUs, 1) << " | " << (torchUs > 0 ? fmt(torchUs, 1) : "n/a") << " | "
               << (torchGraphUs > 0 ? fmt(torchGraphUs, 1) : "n/a") << " | " << fmt(s.value("speedup", 0.0), 2)
               << "x | " << vsEager << " | " << vsGraph << " | " << roof << " | " << paramsText(bestParams) << " | "
               << (perShape.count(shape.label()) ? fmt(perShape[shape.label()].first, 1) + " ("
                              + paramsText(perShape[shape.label()].second) + ")"
                                                 : std::string("n/a"))
               << " |\n";
            std::printf("%-13s %-22s base %9.1f us  tmpl %9.1f us  eager %9.1f us  graph %8.1f us  x%.2f vs base  %s "
                        "vs eager  %s vs graph  %s\n",
                name.c_str(), shape.label().c_str(), baseUs, candUs, torchUs, torchGraphUs, s.value("speedup", 0.0),
                vsEager.c_str(), vsGraph.c_str(), roof.c_str());
        }
        probs[name] = { { "best_params", kl::wire::toJson(bestParams) }, { "rows", rows } };
        results["problems"] = probs;
        flush();
        std::fflush(stdout);
    }
    results["problems"] = probs;
    md << "\nReproduce: `scripts/gpu-check harness` on the H200 machine (builds with -DKL_BUILD_GUI=OFF, runs "
          "bench/harness/torch_eager.py then build/bench/harness/bench_harness).\n";
    flush();
    std::printf("\n%s", md.str().c_str());
    return 0;
}
