// What the time op and the pipeline op do alike around timed launches (kernels/HARNESS.md, "Timing"): outputs and
// workspaces re-initialised with their canaries, canaries checked, inputs hashed, and the verdicts of it all.
#include "kernels/worker/engine_buffers.h"

#include "kernels/worker/correctness_slots.h"
#include "kernels/worker/cuda_check.h"
#include "kernels/worker/harness_kernels.h"

namespace kl::worker {

void prepareOutputSlabs(const HarnessKernels& h, CUstream s, const std::vector<CandidateSlab>& slabs)
{
    for (const auto& cs : slabs) {
        if (cs.role != TensorRole::Output)
            continue;
        if (!cs.workspace && cs.elements)
            h.slabPoison(s, cs.base, cs.layout, cs.elements, cs.dtype, HarnessKernels::poisonPattern(cs.dtype, 0));
        if (cs.workspace && !cs.zeroInit && cs.elements)
            h.slabPoison(s, cs.base, cs.layout, cs.elements, DType::I32, kWorkspacePoison);
        h.slabCanaryFill(s, cs.base, cs.layout);
    }
}

void checkSlabCanaries(const HarnessKernels& h, CUstream s, const std::vector<CandidateSlab>& slabs, CUdeviceptr slot)
{
    KL_CU(cuMemsetD8Async(slot, 0, 8, s));
    for (const auto& cs : slabs)
        h.slabCanaryCheck(s, cs.base, cs.layout, slot);
}

std::uint64_t hashInputSlabs(
    const HarnessKernels& h, CUstream s, const std::vector<CandidateSlab>& slabs, CUdeviceptr slot)
{
    KL_CU(cuMemsetD8Async(slot, 0, 8, s));
    std::uint64_t salt = 1;
    for (const auto& cs : slabs)
        if (cs.role == TensorRole::Input)
            h.hash(s, cs.base, cs.layout.mappedBytes, salt++ * 0x100000001ull, slot);
    KL_CU(cuStreamSynchronize(s));
    std::uint64_t v = 0;
    KL_CU(cuMemcpyDtoH(&v, slot, 8)); // no candidate kernel runs between the hash and this read
    return v;
}

bool judgeTimedChecks(const std::uint64_t* slots, std::size_t stride, const std::vector<int>& batches,
    const std::vector<std::string>& names, const std::vector<Tolerance>& tolerances, std::uint64_t seed,
    bool inputsUnchanged, std::uint64_t canaryBad, const std::string& who, const std::string& where,
    std::vector<CorrectnessStats>& checks, std::vector<VerdictReason>& reasons)
{
    bool allOk = inputsUnchanged && canaryBad == 0;
    for (std::size_t c = 0; c < batches.size(); ++c) {
        OutputJudgement j = judgeCheck(slots + c * stride * kSlotCount, names, tolerances);
        CorrectnessStats& cs = j.stats;
        cs.canariesIntact = canaryBad == 0;
        cs.inputsUnchanged = inputsUnchanged;
        cs.distribution = "timed:" + std::to_string(batches[c]);
        cs.seed = seed;
        cs.passed = cs.passed && cs.canariesIntact && cs.inputsUnchanged;
        if (!j.failures.empty())
            addReason(reasons,
                reason("dynamic.timed-output-wrong",
                    "outputs " + who + " wrote during the timed runs are wrong " + where + ": "
                        + j.failures.front().second));
        allOk = allOk && cs.passed;
        checks.push_back(cs);
    }
    if (!inputsUnchanged)
        addReason(
            reasons, reason("dynamic.input-modified", who + " changed its inputs during the timed runs " + where));
    if (canaryBad)
        addReason(reasons,
            reason("dynamic.canary",
                who + " wrote outside its buffers during the timed runs " + where + " (" + std::to_string(canaryBad)
                    + " guard words changed)"));
    return allOk;
}

} // namespace kl::worker
