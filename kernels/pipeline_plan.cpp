#include "kernels/pipeline_plan.h"

#include "kernels/harness_plan.h"

#include <algorithm>
#include <stdexcept>

namespace kl {

std::size_t PipelineLayout::bufferOf(const TensorSource& s) const
{
    for (std::size_t i = 0; i < buffers.size(); ++i)
        if (buffers[i].source == s)
            return i;
    throw std::out_of_range("no pipeline buffer for " + s.text());
}

PipelineLayout planPipeline(const Pipeline& p, const Shape& shape)
{
    PipelineLayout l;
    auto add = [&](const TensorSource& source, bool input) {
        PipelineBuffer b;
        b.source = source;
        b.spec = p.sourceSpec(source);
        const PipelineStage* describing = p.describingStage(source);
        if (!b.spec || !describing)
            throw std::invalid_argument("pipeline " + p.name + ": '" + source.text() + "' names no tensor");
        b.describingShape = describing->shapeAt(shape);
        b.elements = 1;
        for (const auto e : p.extentsAt(source, shape))
            b.elements *= static_cast<std::uint64_t>(std::max<std::int64_t>(e, 0));
        b.bytes = b.elements * dtypeBytes(b.spec->dtype);
        b.pipelineInput = input;
        for (const auto& o : p.outputs)
            b.pipelineOutput = b.pipelineOutput || o.source == source;
        l.bytesPerSet += b.bytes;
        l.buffers.push_back(std::move(b));
    };
    for (const auto& in : p.inputs)
        add({ "", in }, true);
    for (const auto& st : p.stages)
        for (const auto& t : st.problem.tensors)
            if (t.role == TensorRole::Output)
                add({ st.name, t.name }, false);
    for (const auto& st : p.stages) {
        PipelineStageBinding b;
        b.shape = st.shapeAt(shape);
        for (const auto& t : st.problem.tensors)
            b.buffers[t.name]
                = l.bufferOf(t.role == TensorRole::Output ? TensorSource { st.name, t.name } : st.inputs.at(t.name));
        l.stages.push_back(std::move(b));
    }
    return l;
}

int pipelineRotationSets(
    std::uint64_t bytesPerSet, std::int64_t l2Bytes, std::uint64_t budgetBytes, int variants, int maxSets)
{
    const std::uint64_t per = std::max<std::uint64_t>(bytesPerSet, 1);
    const std::uint64_t l2x2 = 2 * static_cast<std::uint64_t>(std::max<std::int64_t>(l2Bytes, 0));
    int sets = static_cast<int>(std::clamp<std::uint64_t>((l2x2 + per - 1) / per + 1, 2, maxSets));
    while (sets > 1 && static_cast<std::uint64_t>(sets) * per * static_cast<std::uint64_t>(variants) > budgetBytes)
        --sets;
    return sets;
}

Tolerance pipelineTolerance(const Tolerance& floor, const std::vector<MeasuredError>& honest)
{
    Tolerance t = floor;
    for (const auto& e : honest)
        if (e.valid) {
            t.relL2 = std::max(t.relL2, kMeasuredToleranceFactor * e.relL2);
            t.maxAbs = std::max(t.maxAbs, kMeasuredToleranceFactor * e.maxAbs);
        }
    return t;
}

} // namespace kl
