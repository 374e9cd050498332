#include "core/fidelity.h"

namespace kl {

std::string Fidelity::label() const
{
    if (!screen())
        return "full";
    return "screen:" + std::to_string(screenSamples) + "x" + (screenShapes > 0 ? std::to_string(screenShapes) : "all");
}

std::vector<Shape> screenTuningShapes(const std::vector<Shape>& tuning, const Fidelity& f)
{
    if (!f.screen() || f.screenShapes <= 0 || static_cast<std::size_t>(f.screenShapes) >= tuning.size())
        return tuning;
    const std::size_t k = static_cast<std::size_t>(f.screenShapes);
    std::vector<Shape> out;
    for (std::size_t j = 0; j < k; ++j)
        out.push_back(tuning[k == 1 ? 0 : j * (tuning.size() - 1) / (k - 1)]);
    return out;
}

} // namespace kl
