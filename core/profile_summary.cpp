#include "core/profile_summary.h"

#include "core/errors.h"
#include "core/json_io.h"

#include <algorithm>
#include <cstdio>

namespace kl {

std::string rooflineClass(double dramPct, double smPct)
{
    if (dramPct < 0 && smPct < 0)
        return "unknown";
    // NVIDIA's speed-of-light thresholds (Nsight Compute bottleneck guide): above 60% a pipe is busy. Below 60% on
    // both, a pipe at 40% or more is the bound only when it clearly leads the other (1.5x); two pipes at similar low
    // figures (DRAM 33%, SM 41%) mean neither limits the kernel: it is latency-bound, the GPU under-utilised.
    const double d = std::max(dramPct, 0.0), c = std::max(smPct, 0.0);
    if (d > 60 && c > 60)
        return "balanced";
    const bool bothLow = d < 60 && c < 60;
    if (d >= 40 && d >= c && (!bothLow || d >= 1.5 * c))
        return "memory-bound";
    if (c >= 40 && c > d && (!bothLow || c >= 1.5 * d))
        return "compute-bound";
    return "latency-bound";
}

std::string boundAdvice(const std::string& bound, double dramPct, double smPct, double occupancyPct)
{
    char buf[320];
    if (bound == "unknown")
        return "no counters";
    if (bound == "memory-bound" && dramPct >= 80)
        std::snprintf(buf, sizeof buf,
            "at the DRAM ceiling (%.0f%% of peak): only moving fewer bytes (fusion, narrower types, reuse) makes it "
            "faster",
            dramPct);
    else if (bound == "memory-bound")
        std::snprintf(buf, sizeof buf,
            "memory-bound below the ceiling (DRAM %.0f%%, achieved occupancy %.0f%%): keep more bytes in flight "
            "(wider or vectorised loads, more independent loads per thread, more warps or blocks per SM)",
            dramPct, occupancyPct);
    else if (bound == "compute-bound")
        std::snprintf(buf, sizeof buf,
            "compute-bound (SM %.0f%%): fewer or cheaper instructions per element, tensor cores where they apply",
            smPct);
    else if (bound == "balanced")
        std::snprintf(buf, sizeof buf, "both DRAM (%.0f%%) and SM (%.0f%%) near their ceilings", dramPct, smPct);
    else
        std::snprintf(buf, sizeof buf,
            "latency-bound (DRAM %.0f%%, SM %.0f%%): neither unit is busy; more parallelism (blocks, warps, "
            "independent loads) or fewer dependent stalls and launches",
            dramPct, smPct);
    return buf;
}

const ProfiledKernel* dominantKernel(const CandidateProfile& p)
{
    const ProfiledKernel* best = nullptr;
    for (const auto& k : p.kernels)
        if (!best || k.durationUs > best->durationUs)
            best = &k;
    return best;
}

namespace {
    std::string fixed(double v, const char* unit)
    {
        if (v < 0)
            return "n/a";
        char buf[48];
        std::snprintf(buf, sizeof buf, "%.1f%s", v, unit);
        return buf;
    }
    std::string micros(double us)
    {
        char buf[48];
        std::snprintf(buf, sizeof buf, "%.2f us", us);
        return buf;
    }
} // namespace

std::string bottleneckSummary(const CandidateProfile& p)
{
    std::string s = "Profile of " + p.candidateId + (p.shape.empty() ? "" : " on " + p.shape) + " (GPU worker: "
        + (p.kernels.empty() ? "no kernels recorded" : "traced runs and speed-of-light counters") + ")";
    if (p.candidateUs > 0) {
        s += ": " + micros(p.candidateUs) + " of GPU time per run";
        if (p.baselineUs > 0) {
            char buf[96];
            std::snprintf(
                buf, sizeof buf, " vs %.2f us for the baseline (%.2fx)", p.baselineUs, p.baselineUs / p.candidateUs);
            s += buf;
        }
    }
    s += ".\n";
    for (const auto& k : p.kernels) {
        s += "- " + k.name.substr(0, 100) + ": " + (k.durationUs >= 0 ? micros(k.durationUs) : "time n/a") + ", DRAM "
            + fixed(k.dramPct, "%") + " of peak, SM " + fixed(k.smPct, "%") + ", achieved occupancy "
            + fixed(k.occupancyPct, "%") + ": " + rooflineClass(k.dramPct, k.smPct) + "\n";
    }
    if (const ProfiledKernel* k = dominantKernel(p)) {
        const std::string bound = rooflineClass(k->dramPct, k->smPct);
        s += "Bound: " + bound + (p.kernels.size() > 1 ? " (its longest kernel, " + k->name.substr(0, 60) + ")" : "")
            + ".\n";
        if (bound != "unknown")
            s += "What limits it: " + boundAdvice(bound, k->dramPct, k->smPct, k->occupancyPct) + ".\n";
    }
    if (!p.note.empty())
        s += "Counters: " + p.note + "\n";
    return s;
}

nlohmann::json toJson(const CandidateProfile& p)
{
    nlohmann::json kernels = nlohmann::json::array();
    for (const auto& k : p.kernels)
        kernels.push_back({ { "name", k.name }, { "duration_us", k.durationUs }, { "dram_pct", k.dramPct },
            { "sm_pct", k.smPct }, { "occupancy_pct", k.occupancyPct } });
    return { { "candidate", p.candidateId }, { "shape", p.shape }, { "candidate_us", p.candidateUs },
        { "baseline_us", p.baselineUs }, { "kernels", kernels }, { "note", p.note } };
}

CandidateProfile candidateProfileFromJson(const nlohmann::json& j, const std::string& where)
{
    if (!j.is_object())
        throw InputError(where + ": a profile must be an object");
    CandidateProfile p;
    p.candidateId = jsonfield::string(j, "candidate", where);
    p.shape = jsonfield::stringOr(j, "shape", "", where);
    p.candidateUs = jsonfield::numberOr(j, "candidate_us", -1, where);
    p.baselineUs = jsonfield::numberOr(j, "baseline_us", -1, where);
    p.note = jsonfield::stringOr(j, "note", "", where);
    const nlohmann::json& kernels = jsonfield::require(j, "kernels", where);
    if (!kernels.is_array())
        throw InputError(where + ".kernels: must be an array");
    for (std::size_t i = 0; i < kernels.size(); ++i) {
        const std::string at = where + ".kernels[" + std::to_string(i) + "]";
        ProfiledKernel k;
        k.name = jsonfield::string(kernels[i], "name", at);
        k.durationUs = jsonfield::numberOr(kernels[i], "duration_us", -1, at);
        k.dramPct = jsonfield::numberOr(kernels[i], "dram_pct", -1, at);
        k.smPct = jsonfield::numberOr(kernels[i], "sm_pct", -1, at);
        k.occupancyPct = jsonfield::numberOr(kernels[i], "occupancy_pct", -1, at);
        p.kernels.push_back(std::move(k));
    }
    return p;
}

} // namespace kl
