#include "kernels/worker/correctness_slots.h"

#include "kernels/worker/harness_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace kl::worker {

namespace {

    std::string fmt(double v)
    {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.3g", v);
        return buf;
    }

    OutputJudgement judgeOutputs(const std::vector<std::string>& names, const std::vector<OutputError>& errors,
        const std::vector<Tolerance>& tolerances)
    {
        OutputJudgement j;
        j.stats.fullCoverage = true;
        double worst = -1;
        bool allPass = true;
        for (std::size_t i = 0; i < names.size(); ++i) {
            const OutputError& e = errors[i];
            const Tolerance& t = tolerances[i];
            const double ratio = std::max(e.relL2 / std::max(t.relL2, 1e-300), e.maxAbs / std::max(t.maxAbs, 1e-300));
            const bool finite = std::isfinite(e.relL2);
            if (ratio > worst || !finite) {
                worst = finite ? ratio : INFINITY;
                j.stats.relL2 = e.relL2;
                j.stats.maxAbs = e.maxAbs;
                j.worstOutput = names[i];
            }
            j.stats.nonFinite = j.stats.nonFinite || e.nonFinite;
            j.stats.fullCoverage = j.stats.fullCoverage && e.poisonLeft == 0;
            auto fail = [&](const char* rule, const std::string& detail) {
                allPass = false;
                for (const auto& f : j.failures)
                    if (f.first == rule)
                        return;
                j.failures.emplace_back(rule, detail);
            };
            if (e.poisonLeft)
                fail("dynamic.coverage",
                    std::to_string(e.poisonLeft) + " elements of output '" + names[i] + "' were never written");
            if (e.nonFinite)
                fail("correctness.non-finite", "NaN or Inf in output '" + names[i] + "' where the reference is finite");
            if (!e.poisonLeft && !e.nonFinite && (e.relL2 > t.relL2 || !finite))
                fail("correctness.rel-l2",
                    "relative L2 error " + fmt(e.relL2) + " > " + fmt(t.relL2) + " in output '" + names[i] + "'");
            if (!e.poisonLeft && !e.nonFinite && e.maxAbs > t.maxAbs)
                fail("correctness.max-abs",
                    "max error " + fmt(e.maxAbs) + " > " + fmt(t.maxAbs) + " in output '" + names[i] + "'");
        }
        j.stats.passed = allPass;
        return j;
    }

} // namespace

OutputError readOutputError(const std::uint64_t* s)
{
    OutputError e;
    double sd, sref;
    std::memcpy(&sd, &s[kSumSqDiff], 8);
    std::memcpy(&sref, &s[kSumSqRef], 8);
    float mx;
    const auto bits = static_cast<std::uint32_t>(s[kMaxErr]);
    std::memcpy(&mx, &bits, 4);
    e.relL2 = sref > 0 ? std::sqrt(sd / sref) : std::sqrt(sd);
    e.maxAbs = mx;
    e.nonFinite = s[kNonFinite] != 0;
    e.poisonLeft = s[kPoisonLeft];
    return e;
}

OutputJudgement judgeCheck(
    const std::uint64_t* slots, const std::vector<std::string>& names, const std::vector<Tolerance>& tolerances)
{
    std::vector<OutputError> errors;
    for (std::size_t oi = 0; oi < names.size(); ++oi)
        errors.push_back(readOutputError(slots + oi * kSlotCount));
    return judgeOutputs(names, errors, tolerances);
}

VerdictReason reason(const std::string& rule, const std::string& msg, bool blocking)
{
    VerdictReason r;
    r.rule = rule;
    r.message = msg;
    r.blocking = blocking;
    return r;
}

void addReason(std::vector<VerdictReason>& out, VerdictReason r)
{
    for (const auto& x : out)
        if (x.rule == r.rule)
            return;
    out.push_back(std::move(r));
}

} // namespace kl::worker
