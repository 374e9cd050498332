#pragma once
// The dispatch table of an exported kernel, computed from a session's per-shape measurements.
//
// Every measured shape is a point: a win (correct, and faster than the baseline with the lower end of the
// speedup's 95% confidence interval above 1), a loss (incorrect, or timed and not surely faster) or
// neutral (verified correct but not timed). A small decision tree splits the points on one dim at a time
// until each leaf holds only wins or only losses; each winning leaf becomes a box (per-dim [lo, hi]) that is
// the bounding box of its wins, so the candidate is dispatched only between shapes where it was measured
// faster and never across a shape where it lost. Everything outside the boxes goes to the fallback.
#include "core/evaluation.h"
#include "core/problem.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kl::exporter {

enum class PointClass { Win, Loss, Neutral };
const char* pointClassName(PointClass c);

struct DispatchPoint {
    Shape shape;
    PointClass cls = PointClass::Neutral;
    std::string why; // "speedup 1.42x [1.38, 1.47]", "incorrect", "not faster: 0.97x [0.95, 0.99]"
    bool heldOut = false;
    double speedup = 0;
    double speedupCiLow = 0;
    double speedupCiHigh = 0;
};

struct DimRange {
    std::int64_t lo = 0;
    std::int64_t hi = 0;
};

struct DispatchRegion {
    std::vector<DimRange> ranges; // one per DispatchPlan::dims, in that order
    bool candidate = false;
    int wins = 0;
    int losses = 0;
    double minSpeedup = 0; // over the wins inside (candidate regions) or the losses (fallback regions)
    double maxSpeedup = 0;
    bool contains(const std::vector<std::int64_t>& dimValues) const;
    std::string label(const std::vector<std::string>& dims) const; // "T in [1, 4096], H in [1024, 16384]"
};

struct DispatchPlan {
    std::vector<std::string> dims; // the problem's dims, in declaration order
    std::vector<DispatchPoint> points;
    std::vector<DispatchRegion> candidateRegions; // the table the dispatcher searches
    std::vector<DispatchRegion> lossRegions; // leaves where it lost: documentation only
    std::vector<DimRange> verifiedRange; // bounding box of every correct shape
    std::vector<DimRange> validityRange; // the problem's declared [min, max] per dim

    // Box membership only; constraints are checked by the generated code in addition.
    bool inCandidateRegion(const Shape& s) const;
    std::vector<std::int64_t> valuesOf(const Shape& s) const; // throws InputError for a missing dim
};

// minSpeedup: the lower CI end a shape must clear to count as a win (1.0: surely not slower).
DispatchPlan buildDispatchPlan(const Problem& problem, const std::vector<ShapeResult>& shapes, double minSpeedup = 1.0);

} // namespace kl::exporter
