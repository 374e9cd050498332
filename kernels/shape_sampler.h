#pragma once
// Held-out verification shapes: drawn at random from a problem's declared validity range on every
// verification (seeded; recorded, never shown to agents), always with the extremes of the range.
#include "core/problem.h"

#include <cstdint>
#include <vector>

namespace kl {

// The corners that catch special-casing: every dim at its minimum, and each dim alone at its maximum with
// the others at their minimum ("1 row; the longest context"), plus every dim at its maximum. Shapes that
// break a dim constraint are left out.
std::vector<Shape> extremeShapes(const Problem& p);
// count shapes drawn log-uniformly (or uniformly, per dim) with rejection against the dim constraints and, when
// given, a regime's condition (fewer when the regime is too small a part of the range to hit in 200 draws).
std::vector<Shape> randomShapes(const Problem& p, int count, std::uint64_t seed, const Regime* inside = nullptr);
// Extremes first, then random ones; duplicates of each other removed; with `inside`, only shapes of that regime.
std::vector<Shape> heldOutShapes(
    const Problem& p, int randomCount, std::uint64_t seed, bool withExtremes = true, const Regime* inside = nullptr);

} // namespace kl
