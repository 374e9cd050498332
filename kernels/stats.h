#pragma once
// Order statistics for timing samples: median, percentiles and a distribution-free 95% confidence
// interval of the median (binomial ranks), so no normality is assumed for skewed GPU timings.
#include "core/evaluation.h"

#include <vector>

namespace kl {

double percentile(std::vector<double> v, double q); // q in [0, 1], linear interpolation
// 95% CI of the median: the order statistics at ranks n/2 -+ 0.98*sqrt(n) (normal approximation to the
// binomial). Exact for the purpose of "is the median pinned down to 1%".
void medianConfidence(std::vector<double> v, double* low, double* high);
TimingStats summarize(const std::vector<double>& samplesUs, bool graphMode, int launchesPerSample);
// Relative half width of the median's CI: (high - low) / 2 / median.
double relativeHalfWidth(const TimingStats& t);

} // namespace kl
