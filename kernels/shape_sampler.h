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
// count shapes drawn log-uniformly (or uniformly, per dim) with rejection against the dim constraints.
std::vector<Shape> randomShapes(const Problem& p, int count, std::uint64_t seed);
// Extremes first, then random ones; duplicates of each other removed.
std::vector<Shape> heldOutShapes(const Problem& p, int randomCount, std::uint64_t seed, bool withExtremes = true);

} // namespace kl
