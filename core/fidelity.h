#pragma once
#include "core/problem.h"

#include <string>
#include <vector>

namespace kl {

// How thoroughly an evaluation times a candidate. A screen (multi-fidelity search, agent/tuner/multi_fidelity.h)
// times few samples on a subset of the tuning shapes, after the full correctness checks: it ranks
// configurations for promotion to the full protocol and is never accepted as a best.
struct Fidelity {
    int screenSamples = 0; // timing samples per shape; 0: the full protocol
    int screenShapes = 0; // tuning shapes a screen times, spread over the list (screenTuningShapes); 0: all
    bool screen() const { return screenSamples > 0; }
    std::string label() const; // "full", "screen:8x2"
    // Spelled out: nvcc compiles this header in C++17 (the CUPTI tests), which has no defaulted comparisons.
    bool operator==(const Fidelity& o) const
    {
        return screenSamples == o.screenSamples && screenShapes == o.screenShapes;
    }
};
// The tuning shapes a fidelity times: all of them for the full protocol, else screenShapes of them spread evenly
// over the list (first and last included), in the list's order.
std::vector<Shape> screenTuningShapes(const std::vector<Shape>& tuning, const Fidelity& f);

} // namespace kl
