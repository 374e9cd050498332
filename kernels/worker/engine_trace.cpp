// The trace op (N launches with events and CUPTI kernel records, for timelines and the CUPTI agreement check) and
// the buffers of the profile op's counter run.
#include "kernels/worker/cuda_check.h"
#include "kernels/worker/cupti_kernel_log.h"
#include "kernels/worker/engine.h"
#include "kernels/worker/engine_buffers.h"

#include <algorithm>

namespace kl::worker {

TraceOutcome Engine::trace(const LoadedProblem& lp, const Plan& candidate, const Shape& s, int launches)
{
    TraceOutcome out;
    const Problem& p = lp.problem;
    auto cb = candidate.bind(p, s);
    const auto sizes = tensorSizes(p, s);
    std::uint64_t ioBytes = 0;
    for (const auto& t : sizes)
        ioBytes += t.bytes;
    const int sets = static_cast<int>(std::clamp<std::uint64_t>(
        2 * static_cast<std::uint64_t>(m_device.l2Bytes) / std::max<std::uint64_t>(ioBytes, 1) + 1, 2, 256));
    std::vector<CandidateSlab> slabs;
    std::uint64_t bytes = m_cand.granularity();
    for (const auto& t : sizes)
        slabs.push_back(tensorSlab(t, sets, m_cand.granularity(), m_rng));
    for (const auto& w : cb->workspaces())
        slabs.push_back(workspaceSlab(w, sets, m_cand.granularity(), m_rng));
    for (const auto& cs : slabs)
        bytes += cs.layout.mappedBytes;
    KL_CU(cuStreamSynchronize(m_stream));
    m_cand.reset(bytes);
    std::vector<BufferMap> bufs(static_cast<std::size_t>(sets));
    for (std::size_t i = 0; i < slabs.size(); ++i) {
        auto& cs = slabs[i];
        cs.base = mapSlab(cs.layout);
        m_harness.slabCanaryFill(m_stream, cs.base, cs.layout);
        for (int k = 0; k < sets; ++k)
            bufs[static_cast<std::size_t>(k)][cs.name] = cs.buffer(k);
        const TensorSpec* spec = p.tensor(cs.name);
        if (!cs.workspace && cs.elements && spec && readsInput(spec->role))
            m_harness.slabFillInput(
                m_stream, cs.base, cs.layout, *spec, s, cs.elements, Distribution::Normal, 77 + i * 1000);
        else if (!cs.workspace && cs.elements)
            m_harness.slabFill(m_stream, cs.base, cs.layout, cs.elements, cs.dtype, Distribution::Normal, 77 + i * 1000,
                spec ? spec->scale : 1.0);
    }
    for (int i = 0; i < 3; ++i)
        cb->run(m_stream, bufs[i % sets]);
    KL_CU(cuStreamSynchronize(m_stream));
    out.cuptiAvailable = CuptiKernelLog::instance().available();
    if (out.cuptiAvailable)
        CuptiKernelLog::instance().start();
    std::vector<CUevent> ev(2 * static_cast<std::size_t>(launches));
    for (auto& e : ev)
        KL_CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
    for (int i = 0; i < launches; ++i) {
        KL_CU(cuEventRecord(ev[2 * i], m_stream));
        cb->run(m_stream, bufs[i % sets]);
        KL_CU(cuEventRecord(ev[2 * i + 1], m_stream));
    }
    KL_CU(cuCtxSynchronize());
    for (int i = 0; i < launches; ++i) {
        float ms = 0;
        KL_CU(cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        out.eventUs.push_back(ms * 1000.0);
    }
    for (auto e : ev)
        cuEventDestroy(e);
    if (out.cuptiAvailable)
        out.records = CuptiKernelLog::instance().stop();
    return out;
}

BufferMap Engine::filledBuffers(const Problem& p, const Shape& s, const BoundPlan& bound, std::uint64_t seed)
{
    const auto sizes = tensorSizes(p, s);
    std::uint64_t total = 0;
    for (const auto& t : sizes)
        total += alignUp(std::max<std::uint64_t>(t.bytes, 4), kAlign) + 64 * kAlign;
    for (const auto& w : bound.workspaces())
        total += alignUp(std::max<std::uint64_t>(w.bytes, 4), kAlign) + 64 * kAlign;
    arenaReserve(total + 4096 * kAlign);
    arenaReset();
    BufferMap buffers;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        const auto& t = sizes[i];
        const CUdeviceptr ptr = arenaAlloc(t.bytes);
        buffers[t.spec->name] = ptr;
        if (t.elements && readsInput(t.spec->role))
            m_harness.fillInput(m_stream, ptr, *t.spec, s, t.elements, Distribution::Normal, seed + i);
        else if (t.elements)
            m_harness.fill(m_stream, ptr, t.elements, t.spec->dtype, Distribution::Normal, seed + i, t.spec->scale);
    }
    for (const auto& w : bound.workspaces())
        buffers[w.name] = arenaAlloc(w.bytes);
    return buffers;
}

} // namespace kl::worker
