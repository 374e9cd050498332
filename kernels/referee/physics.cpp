// Physics: a measured number that the hardware cannot produce is not a speedup, it is a bug or a cheat.
#include "kernels/referee/referee.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kl::referee {
namespace {

    std::string format(const char* fmt, double a, double b = 0, double c = 0)
    {
        char buf[256];
        std::snprintf(buf, sizeof buf, fmt, a, b, c);
        return buf;
    }

    std::optional<double> evaluateFormula(const Expr& e, const Shape& shape)
    {
        if (e.empty())
            return std::nullopt;
        try {
            const double v = e.evaluate(shape.bindings());
            if (!std::isfinite(v) || v <= 0)
                return std::nullopt;
            return v;
        } catch (const ExprError&) {
            return std::nullopt;
        }
    }

    double median(std::vector<double> v)
    {
        if (v.empty())
            return 0;
        std::sort(v.begin(), v.end());
        const std::size_t n = v.size();
        return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    }

    void checkFloor(const char* what, const TimingStats& t, double floorSeconds, const ShapeResult& s,
        std::vector<VerdictReason>& out)
    {
        if (floorSeconds <= 0 || t.medianUs <= 0)
            return;
        const double floorUs = floorSeconds * 1e6;
        if (t.medianUs < floorUs) {
            out.push_back({ rule::BelowRoofline,
                s.shape.label() + ": " + what
                    + format(" median %.3f us is below the roofline floor %.3f us (%.2fx faster than the "
                             "hardware allows): the measurement missed work or the output was not computed",
                        t.medianUs, floorUs, floorUs / t.medianUs),
                0, true });
        }
    }

} // namespace

double tensorFlopsPerClockPerSm(const Problem& problem, const DeviceInfo& device)
{
    double sixteenBit = 0;
    if (device.ccMajor == 8 && device.ccMinor == 0)
        sixteenBit = 2048;
    else if (device.ccMajor == 9 && device.ccMinor == 0)
        sixteenBit = 4096;
    else if (device.ccMajor == 10)
        sixteenBit = 8192;
    if (sixteenBit == 0)
        return 0;
    double rate = sixteenBit / 2; // tf32 for fp32 (and f64/int tensors: no faster tensor path applies)
    for (const TensorSpec& t : problem.tensors) {
        if (t.dtype == DType::F16 || t.dtype == DType::BF16)
            rate = std::max(rate, sixteenBit);
        else if (t.dtype == DType::FP8E4M3 || t.dtype == DType::U8)
            rate = std::max(rate, 2 * sixteenBit);
    }
    return rate;
}

double rooflineFloorSeconds(
    const Problem& problem, const Shape& shape, const DeviceInfo& device, const PhysicsSettings& settings)
{
    double work = 0;
    if (const auto bytes = evaluateFormula(problem.bytes, shape); bytes && device.measuredCopyBandwidth > 0) {
        const double bandwidth = device.measuredCopyBandwidth;
        const double resident = device.l2Bytes > 0 ? std::min(*bytes, static_cast<double>(device.l2Bytes)) : 0.0;
        work = (*bytes - resident) / bandwidth + resident / (bandwidth * std::max(1.0, settings.l2BandwidthFactor));
    }
    double peak = settings.peakFlops;
    if (peak <= 0 && device.smCount > 0 && device.smClockMHz > 0) {
        double perClock = tensorFlopsPerClockPerSm(problem, device);
        if (perClock <= 0)
            perClock = settings.flopsPerClockPerSm;
        peak = device.smCount * (device.smClockMHz * 1e6) * perClock;
    }
    if (const auto flops = evaluateFormula(problem.flops, shape); flops && peak > 0)
        work = std::max(work, *flops / peak);
    const double launches = std::max(0, settings.kernelsPerCall) * std::max(0.0, settings.minKernelSeconds);
    return (work + launches) * settings.floorSlack;
}

std::vector<VerdictReason> checkPhysics(
    const Evaluation& evaluation, const Problem& problem, const DeviceInfo& device, const PhysicsSettings& settings)
{
    std::vector<VerdictReason> out;
    for (const ShapeResult& s : evaluation.shapes) {
        const double floor = rooflineFloorSeconds(problem, s.shape, device, settings);
        if (s.timing)
            checkFloor("candidate", *s.timing, floor, s, out);
        if (s.graphTiming)
            checkFloor("graph replay", *s.graphTiming, floor, s, out);
    }

    if (settings.bestObjective && *settings.bestObjective > 0 && evaluation.objective > 0
        && settings.jumpFactor > 1.0) {
        const double jump = evaluation.objective / *settings.bestObjective;
        if (jump > settings.jumpFactor) {
            out.push_back({ rule::SuspiciousJump,
                format("objective %.3f is %.2fx the current best (review threshold %.2fx): a human "
                       "confirms large wins before they are accepted",
                    evaluation.objective, jump, settings.jumpFactor),
                0, false });
        }
    }

    // Gains per timed shape, relative to the current best's speedup on that shape when known, else to the
    // baseline. One shape "carries" the result when its gain dwarfs the others' and holds most of the total.
    // Judged within each of the problem's shape regimes: launch-bound decode shapes gain little from what doubles
    // a bandwidth-bound prefill shape, and that is the regimes' reason to exist, not a special case.
    struct Gain {
        const ShapeResult* shape;
        double gain;
        double weight;
    };
    const std::size_t groups = std::max<std::size_t>(problem.regimes.size(), 1);
    for (std::size_t g = 0; g < groups && !settings.sourceAlreadyAccepted; ++g) {
        std::vector<Gain> gains;
        for (const ShapeResult& s : evaluation.shapes) {
            if (!s.timing || s.speedup <= 0 || s.heldOut)
                continue;
            if (!problem.regimes.empty() && !problem.regimes[g].contains(s.shape))
                continue;
            double reference = 1.0;
            if (const auto it = settings.bestShapeSpeedups.find(s.shape.label());
                it != settings.bestShapeSpeedups.end() && it->second > 0)
                reference = it->second;
            gains.push_back({ &s, s.speedup / reference, s.shape.weight > 0 ? s.shape.weight : 1.0 });
        }
        if (gains.size() < 2)
            continue;
        double totalLog = 0;
        double totalWeight = 0;
        for (const Gain& gn : gains) {
            totalLog += gn.weight * std::log(gn.gain);
            totalWeight += gn.weight;
        }
        const double overall = std::exp(totalLog / totalWeight);
        const auto top = std::max_element(
            gains.begin(), gains.end(), [](const Gain& x, const Gain& y) { return x.gain < y.gain; });
        std::vector<double> others;
        for (const Gain& gn : gains)
            if (&gn != &*top)
                others.push_back(gn.gain);
        const double othersMedian = median(others);
        const double share = totalLog > 0 ? top->weight * std::log(top->gain) / totalLog : 0;
        if (overall >= settings.minGainForShapeCheck && othersMedian > 0
            && top->gain / othersMedian >= settings.singleShapeRatio && share > settings.singleShapeShare) {
            out.push_back({ rule::SingleShapeSpeedup,
                top->shape->shape.label()
                    + format(" gains %.2fx while the other shapes' median gain is %.2fx; that one shape "
                             "carries %.0f%% of the improvement (special-casing a tuned shape?)",
                        top->gain, othersMedian, 100.0 * share)
                    + (problem.regimes.empty() ? std::string() : " in regime " + problem.regimes[g].name),
                0, false });
        }
    }
    return out;
}

} // namespace kl::referee
