// The pipeline op (kernels/HARNESS.md, "Pipelines"): a pipeline's tensors allocated once per rotating set, its
// stages run in order, the whole of it captured into one CUDA graph and timed end to end against the all-baseline
// pipeline (interleaved, both eager and under the graph), verified end to end and stage by stage against the
// stages' references chained, and its timed outputs, canaries and inputs checked as the time op checks them.
#include "kernels/pipeline_plan.h"
#include "kernels/stats.h"
#include "kernels/worker/correctness_slots.h"
#include "kernels/worker/cuda_check.h"
#include "kernels/worker/engine.h"
#include "kernels/worker/engine_buffers.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

namespace kl::worker {

namespace {
    constexpr int kCandidate = 0;
    constexpr int kBaseline = 1;

    // The blocks of one slot per pipeline output at the start of the harness's slots, before the stages' own.
    enum OutputSlots { kEndToEndEager, kEndToEndGraph, kFp32Chain, kAllBaseline, kOutputBlocks };

    MeasuredError measuredError(const OutputError& e)
    {
        MeasuredError m;
        m.relL2 = e.relL2;
        m.maxAbs = e.maxAbs;
        m.valid = !e.nonFinite && !e.poisonLeft && std::isfinite(e.relL2) && std::isfinite(e.maxAbs);
        return m;
    }

    // Graphs and events of one shape, released however the shape ends.
    struct GpuObjects {
        std::vector<CUgraphExec> graphs;
        std::vector<CUevent> events;
        ~GpuObjects()
        {
            for (auto g : graphs)
                cuGraphExecDestroy(g);
            for (auto e : events)
                cuEventDestroy(e);
        }
        CUevent event(std::size_t i)
        {
            while (events.size() <= i) {
                CUevent e;
                KL_CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
                events.push_back(e);
            }
            return events[i];
        }
    };

    // Captures what `enqueue` launches on `s` into an instantiated graph; the error text when it cannot be.
    std::string capture(CUstream s, const std::function<void()>& enqueue, GpuObjects& gpu, CUgraphExec* out)
    {
        *out = nullptr;
        CUresult r = cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
        if (r != CUDA_SUCCESS)
            return cuErrorText(r);
        std::string error;
        try {
            enqueue();
        } catch (const CudaError& e) {
            if (e.sticky())
                throw;
            error = e.what();
        }
        CUgraph graph = nullptr;
        r = cuStreamEndCapture(s, &graph);
        if (r != CUDA_SUCCESS && error.empty())
            error = cuErrorText(r);
        if (error.empty() && graph) {
            r = cuGraphInstantiate(out, graph, 0);
            if (r != CUDA_SUCCESS)
                error = cuErrorText(r);
            else
                gpu.graphs.push_back(*out);
        }
        if (graph)
            cuGraphDestroy(graph);
        return error;
    }
} // namespace

PipelineResult Engine::runPipeline(
    const Pipeline& p, const std::vector<PipelineStageRun>& runs, const PipelineOptions& o)
{
    PipelineResult result;
    result.pipeline = p.name;
    result.device = m_device;
    result.peaks = p.peaks;
    if (runs.size() != p.stages.size())
        throw std::invalid_argument("pipeline " + p.name + ": " + std::to_string(runs.size()) + " stage runs for "
            + std::to_string(p.stages.size()) + " stages");
    const std::size_t nStages = p.stages.size();
    for (const Shape& shape : o.shapes) {
        PipelineShapeResult sr;
        sr.shape = shape;
        const Bindings pb = shape.bindings();
        sr.flops = p.space.flops.evaluate(pb);
        sr.bytes = p.space.bytes.evaluate(pb);
        const PipelineLayout layout = planPipeline(p, shape);
        // ref: the judge (fp64 accumulation); ref32: the fp32 build, whose chain measures the honest end-to-end error.
        std::vector<std::unique_ptr<BoundPlan>> bound[2], ref(nStages), ref32(nStages);
        bound[kCandidate].resize(nStages);
        bound[kBaseline].resize(nStages);
        for (std::size_t i = 0; i < nStages; ++i) {
            PipelineStageResult st;
            st.stage = p.stages[i].name;
            st.problem = p.stages[i].problemName;
            st.impl = runs[i].implLabel;
            st.differsFromBaseline = runs[i].differsFromBaseline;
            st.shape = layout.stages[i].shape;
            sr.stages.push_back(std::move(st));
        }
        try {
            for (std::size_t i = 0; i < nStages; ++i) {
                const LoadedProblem& lp = *runs[i].problem;
                const Shape& s = layout.stages[i].shape;
                bound[kCandidate][i] = (runs[i].impl ? *runs[i].impl : *lp.baseline).bind(lp.problem, s);
                bound[kBaseline][i] = lp.baseline->bind(lp.problem, s);
                ref[i] = lp.reference->bind(lp.problem, s);
                ref32[i] = lp.referenceFp32->bind(lp.problem, s);
            }
        } catch (const LaunchConfigError& e) {
            addReason(
                result.reasons, reason("launch.invalid-config", "pipeline at " + shape.label() + ": " + e.what()));
            result.shapes.push_back(std::move(sr));
            continue;
        }

        // Candidate arena: every pipeline buffer and every stage's workspaces, for `sets` rotating sets, for the
        // pipeline and the all-baseline pipeline apart.
        std::uint64_t workspaceBytes = 0;
        for (int v : { kCandidate, kBaseline })
            for (const auto& b : bound[v])
                for (const auto& w : b->workspaces())
                    workspaceBytes += alignUp(w.bytes, kAlign);
        std::size_t freeMem = 0, totalMem = 0;
        cuMemGetInfo(&freeMem, &totalMem);
        const std::uint64_t budget = (static_cast<std::uint64_t>(freeMem) + m_cand.capacity()) / 2;
        // Three variants of every set: the pipeline's, the all-baseline pipeline's and the harness's pristine inputs.
        const int sets = pipelineRotationSets(layout.bytesPerSet + workspaceBytes / 2, m_device.l2Bytes, budget, 3);
        sr.inputSets = sets;
        const std::uint64_t gran = m_cand.granularity();
        std::vector<CandidateSlab> slabs[2];
        std::vector<std::map<std::string, std::size_t>> wsSlab[2];
        std::uint64_t candBytes = 2 * gran;
        for (int v : { kCandidate, kBaseline }) {
            for (const auto& b : layout.buffers) {
                CandidateSlab cs = tensorSlab({ b.spec, b.elements, b.bytes }, sets, gran, m_rng);
                cs.role = b.pipelineInput ? TensorRole::Input : TensorRole::Output;
                slabs[v].push_back(std::move(cs));
            }
            wsSlab[v].resize(nStages);
            for (std::size_t i = 0; i < nStages; ++i)
                for (const auto& w : bound[v][i]->workspaces()) {
                    wsSlab[v][i][w.name] = slabs[v].size();
                    slabs[v].push_back(workspaceSlab(w, sets, gran, m_rng));
                }
            for (const auto& cs : slabs[v])
                candBytes += cs.layout.mappedBytes;
        }
        KL_CU(cuStreamSynchronize(m_stream));
        KL_CU(cuStreamSynchronize(m_hstream));
        m_cand.reset(candBytes);
        for (int v : { kCandidate, kBaseline })
            for (auto& cs : slabs[v]) {
                cs.base = mapSlab(cs.layout);
                m_harness.slabCanaryFill(m_stream, cs.base, cs.layout);
            }
        const CUdeviceptr scratch = m_cand.map(gran); // the input hash and the canary count
        // What stage i of variant v binds at set k.
        auto buffersOf = [&](int v, std::size_t i, int k) {
            BufferMap m;
            for (const auto& [tensor, b] : layout.stages[i].buffers)
                m[tensor] = slabs[v][b].buffer(k);
            for (const auto& [name, s] : wsSlab[v][i])
                m[name] = slabs[v][s].buffer(k);
            return m;
        };
        auto runStage = [&](int v, std::size_t i, int k) { bound[v][i]->run(m_stream, buffersOf(v, i, k)); };
        auto runAll = [&](int v, int k) {
            for (std::size_t i = 0; i < nStages; ++i)
                runStage(v, i, k);
        };
        // Outputs poisoned, workspaces poisoned unless the plan zeroes them, as before every harness launch.
        auto poisonOutputs = [&](int v) { prepareOutputSlabs(m_harness, m_stream, slabs[v]); };

        // Harness arena: the chained reference's tensors (one set) and the fp32 chain's outputs, their workspaces and
        // the correctness slots: per pipeline output the blocks of OutputSlots, then each stage's outputs.
        const std::size_t nOut = p.outputs.size();
        std::vector<std::size_t> slotStart;
        std::size_t slotCount = kOutputBlocks * nOut;
        for (std::size_t i = 0; i < nStages; ++i) {
            slotStart.push_back(slotCount);
            for (const auto& t : p.stages[i].problem.tensors)
                slotCount += t.role == TensorRole::Output ? 1 : 0;
        }
        // Then the timed re-checks: the pristine inputs of every set, the chained reference's outputs per set, their
        // slots and the compare's pointer lists.
        constexpr int kMaxChecked = 16;
        const std::size_t timedSlots = static_cast<std::size_t>(kMaxChecked) * nOut;
        std::uint64_t hBytes
            = (64ull << 20) + (slotCount + timedSlots) * kSlotCount * 8 + 4ull * nOut * sets * 8 + nOut * 8;
        std::vector<SlabLayout> pristine(layout.buffers.size());
        for (std::size_t b = 0; b < layout.buffers.size(); ++b) {
            const PipelineBuffer& buf = layout.buffers[b];
            hBytes += (buf.pipelineInput ? 1 : 2) * alignUp(std::max<std::uint64_t>(buf.bytes, 16), kAlign);
            if (buf.pipelineInput || buf.pipelineOutput) {
                pristine[b] = packedSlab(buf.bytes, sets);
                hBytes += pristine[b].mappedBytes + kAlign;
            }
        }
        for (const auto* chain : { &ref, &ref32 })
            for (const auto& r : *chain)
                for (const auto& w : r->workspaces())
                    hBytes += alignUp(std::max<std::uint64_t>(w.bytes, 4), kAlign);
        m_hmem.reset(hBytes, m_hstream);
        const CUdeviceptr hSlots = m_hmem.alloc((slotCount + timedSlots) * kSlotCount * 8);
        KL_CU(cuMemsetD8Async(hSlots, 0, (slotCount + timedSlots) * kSlotCount * 8, m_hstream));
        const CUdeviceptr hPairs = m_hmem.alloc(4ull * nOut * sets * 8);
        const CUdeviceptr hRefSumSq = m_hmem.alloc(nOut * 8);
        KL_CU(cuMemsetD8Async(hRefSumSq, 0, nOut * 8, m_hstream));
        std::vector<CUdeviceptr> hSets(layout.buffers.size(), 0); // pristine inputs, or the reference's outputs
        for (std::size_t b = 0; b < layout.buffers.size(); ++b)
            if (pristine[b].sets())
                hSets[b] = m_hmem.alloc(pristine[b].mappedBytes);
        std::vector<CUdeviceptr> hBuf, hBuf32; // the fp32 chain reads the same pipeline inputs
        for (const auto& b : layout.buffers) {
            hBuf.push_back(m_hmem.alloc(std::max<std::uint64_t>(b.bytes, 16)));
            hBuf32.push_back(b.pipelineInput ? hBuf.back() : m_hmem.alloc(std::max<std::uint64_t>(b.bytes, 16)));
        }
        std::vector<BufferMap> refWork(nStages), refWork32(nStages);
        for (std::size_t i = 0; i < nStages; ++i) {
            for (const auto& w : ref[i]->workspaces())
                refWork[i][w.name] = m_hmem.alloc(std::max<std::uint64_t>(w.bytes, 4));
            for (const auto& w : ref32[i]->workspaces())
                refWork32[i][w.name] = m_hmem.alloc(std::max<std::uint64_t>(w.bytes, 4));
        }
        auto compareInto = [&](std::size_t slot, CUdeviceptr cand, std::size_t b) {
            const PipelineBuffer& buf = layout.buffers[b];
            if (!buf.elements)
                return;
            const CUdeviceptr sl = hSlots + slot * kSlotCount * 8;
            m_harness.sumSquares(m_hstream, hBuf[b], buf.elements, buf.spec->dtype, sl + kRefSumSq * 8);
            m_harness.compare(m_hstream, cand, hBuf[b], buf.elements, buf.spec->dtype,
                HarnessKernels::poisonPattern(buf.spec->dtype, 0), sl, sl + kRefSumSq * 8);
        };

        GpuObjects gpu;
        try {
            // Changed guard words of the candidate's slabs, counted whenever their canaries are about to be rewritten.
            std::uint64_t canaryBad = 0;
            auto countCanaries = [&]() {
                checkSlabCanaries(m_harness, m_stream, slabs[kCandidate], scratch + 8);
                KL_CU(cuStreamSynchronize(m_stream));
                std::uint64_t bad = 0;
                KL_CU(cuMemcpyDtoH(&bad, scratch + 8, 8));
                canaryBad += bad;
            };
            // Timing inputs in every set (the same values for both variants); everything else poisoned.
            for (std::size_t b = 0; b < layout.buffers.size(); ++b) {
                const PipelineBuffer& buf = layout.buffers[b];
                if (!buf.pipelineInput || !buf.elements)
                    continue;
                for (int v : { kCandidate, kBaseline })
                    m_harness.slabFillInput(m_stream, slabs[v][b].base, slabs[v][b].layout, *buf.spec,
                        buf.describingShape, buf.elements, Distribution::Normal,
                        o.seed ^ (0x9E3779B97F4A7C15ull * (b + 1)));
                m_harness.slabFillInput(m_hstream, hSets[b], pristine[b], *buf.spec, buf.describingShape, buf.elements,
                    Distribution::Normal, o.seed ^ (0x9E3779B97F4A7C15ull * (b + 1)));
            }
            poisonOutputs(kCandidate);
            poisonOutputs(kBaseline);

            // Fresh inputs for verification, in the harness's pristine copy and the candidate's set 0; the
            // references chained on the harness stream.
            const std::uint64_t verifySeed = o.seed * 0x2545F4914F6CDD1Dull + 0x5EEDull;
            auto fillVerifyInputs = [&](int v) {
                for (std::size_t b = 0; b < layout.buffers.size(); ++b) {
                    const PipelineBuffer& buf = layout.buffers[b];
                    if (buf.pipelineInput && buf.elements)
                        m_harness.fillInput(m_stream, slabs[v][b].buffer(0), *buf.spec, buf.describingShape,
                            buf.elements, Distribution::Normal, verifySeed ^ (0x9E3779B97F4A7C15ull * (b + 1)));
                }
            };
            // Set 0 holds the verification inputs from now on, in the pristine copy too.
            for (std::size_t b = 0; b < layout.buffers.size(); ++b) {
                const PipelineBuffer& buf = layout.buffers[b];
                if (buf.pipelineInput && buf.elements)
                    for (CUdeviceptr to : { hBuf[b], hSets[b] + pristine[b].bufferOffset(0) })
                        m_harness.fillInput(m_hstream, to, *buf.spec, buf.describingShape, buf.elements,
                            Distribution::Normal, verifySeed ^ (0x9E3779B97F4A7C15ull * (b + 1)));
            }
            for (std::size_t i = 0; i < nStages; ++i) {
                BufferMap m = refWork[i], m32 = refWork32[i];
                for (const auto& [tensor, b] : layout.stages[i].buffers) {
                    m[tensor] = hBuf[b];
                    m32[tensor] = hBuf32[b];
                }
                ref[i]->run(m_hstream, m);
                ref32[i]->run(m_hstream, m32);
            }
            auto compareOutputs = [&](OutputSlots block, const std::function<CUdeviceptr(std::size_t)>& outputOf) {
                for (std::size_t oi = 0; oi < nOut; ++oi) {
                    const std::size_t b = layout.bufferOf(p.outputs[oi].source);
                    compareInto(block * nOut + oi, outputOf(b), b);
                }
            };
            // The honest end-to-end error on these inputs: the fp32 chain, and the all-baseline pipeline.
            compareOutputs(kFp32Chain, [&](std::size_t b) { return hBuf32[b]; });
            fillVerifyInputs(kBaseline);
            runAll(kBaseline, 0);
            handoff(m_stream, m_hstream);
            compareOutputs(kAllBaseline, [&](std::size_t b) { return slabs[kBaseline][b].buffer(0); });
            // End to end, eager.
            handoff(m_hstream, m_stream);
            fillVerifyInputs(kCandidate);
            runAll(kCandidate, 0);
            handoff(m_stream, m_hstream);
            compareOutputs(kEndToEndEager, [&](std::size_t b) { return slabs[kCandidate][b].buffer(0); });
            // Each stage alone, on the chained reference's inputs (copied into its own buffers of set 0).
            for (std::size_t i = 0; i < nStages; ++i) {
                handoff(m_stream, m_hstream);
                for (const auto& [tensor, source] : p.stages[i].inputs) {
                    const std::size_t b = layout.stages[i].buffers.at(tensor);
                    if (layout.buffers[b].bytes)
                        KL_CU(cuMemcpyDtoDAsync(
                            slabs[kCandidate][b].buffer(0), hBuf[b], layout.buffers[b].bytes, m_hstream));
                }
                handoff(m_hstream, m_stream);
                for (const auto& t : p.stages[i].problem.tensors)
                    if (t.role == TensorRole::Output) {
                        const PipelineBuffer& buf = layout.buffers[layout.stages[i].buffers.at(t.name)];
                        if (buf.elements)
                            m_harness.poison(m_stream, slabs[kCandidate][layout.stages[i].buffers.at(t.name)].buffer(0),
                                buf.elements, t.dtype, HarnessKernels::poisonPattern(t.dtype, 0));
                    }
                runStage(kCandidate, i, 0);
                handoff(m_stream, m_hstream);
                std::size_t oi = 0;
                for (const auto& t : p.stages[i].problem.tensors)
                    if (t.role == TensorRole::Output) {
                        const std::size_t b = layout.stages[i].buffers.at(t.name);
                        compareInto(slotStart[i] + oi++, slabs[kCandidate][b].buffer(0), b);
                    }
            }
            handoff(m_hstream, m_stream);

            // Capture: each stage alone first, so a failure names its stage; then the whole pipeline, per set.
            bool allCaptured = true;
            for (std::size_t i = 0; i < nStages; ++i) {
                CUgraphExec g = nullptr;
                const std::string error = capture(
                    m_stream, [&] { runStage(kCandidate, i, 0); }, gpu, &g);
                sr.stages[i].captured = error.empty();
                sr.stages[i].captureError = error;
                allCaptured = allCaptured && error.empty();
            }
            std::vector<CUgraphExec> pipelineGraph[2];
            if (allCaptured) {
                for (int v : { kCandidate, kBaseline })
                    for (int k = 0; k < sets; ++k) {
                        CUgraphExec g = nullptr;
                        const std::string error = capture(
                            m_stream, [&] { runAll(v, k); }, gpu, &g);
                        if (!error.empty()) {
                            addReason(result.reasons,
                                reason("pipeline.graph-capture-failed",
                                    std::string(v == kCandidate ? "the pipeline" : "the all-baseline pipeline")
                                        + " could not be captured whole at " + shape.label() + ": " + error));
                            pipelineGraph[kCandidate].clear();
                            break;
                        }
                        pipelineGraph[v].push_back(g);
                    }
            }
            const bool graphs = pipelineGraph[kCandidate].size() == static_cast<std::size_t>(sets)
                && pipelineGraph[kBaseline].size() == static_cast<std::size_t>(sets);
            // End to end, replayed from the graph.
            if (graphs) {
                fillVerifyInputs(kCandidate);
                countCanaries();
                poisonOutputs(kCandidate);
                KL_CU(cuGraphLaunch(pipelineGraph[kCandidate][0], m_stream));
                handoff(m_stream, m_hstream);
                compareOutputs(kEndToEndGraph, [&](std::size_t b) { return slabs[kCandidate][b].buffer(0); });
                handoff(m_hstream, m_stream);
            }
            // The verdicts of the checks.
            std::vector<std::uint64_t> host(slotCount * kSlotCount);
            KL_CU(cuStreamSynchronize(m_hstream));
            KL_CU(cuMemcpyDtoH(host.data(), hSlots, host.size() * 8));
            // End to end, every stage's rounding adds up: each output's budget is derived from the honest error
            // measured on these same inputs (kl::pipelineTolerance); the timed re-checks are judged by it too.
            std::vector<std::string> names;
            std::vector<Tolerance> tolerances;
            {
                auto errorAt = [&](OutputSlots block, std::size_t oi) {
                    return measuredError(readOutputError(&host[(block * nOut + oi) * kSlotCount]));
                };
                for (std::size_t oi = 0; oi < nOut; ++oi) {
                    const PipelineOutput& out = p.outputs[oi];
                    PipelineOutputBudget b;
                    b.output = out.name;
                    b.floor = outputTolerances(
                        *runs[static_cast<std::size_t>(p.stageIndex(out.source.stage))].problem, { out.source.tensor })
                                  .front();
                    b.fp32Chain = errorAt(kFp32Chain, oi);
                    b.allBaseline = errorAt(kAllBaseline, oi);
                    b.tolerance = pipelineTolerance(b.floor, { b.fp32Chain, b.allBaseline });
                    b.pipeline = errorAt(kEndToEndEager, oi);
                    if (graphs) {
                        const MeasuredError g = errorAt(kEndToEndGraph, oi);
                        auto over = [&](const MeasuredError& e) {
                            return e.valid ? std::max(e.relL2 / std::max(b.tolerance.relL2, 1e-300),
                                       e.maxAbs / std::max(b.tolerance.maxAbs, 1e-300))
                                           : INFINITY;
                        };
                        if (over(g) > over(b.pipeline))
                            b.pipeline = g;
                    }
                    names.push_back(out.name);
                    tolerances.push_back(b.tolerance);
                    sr.budgets.push_back(b);
                }
                for (OutputSlots block : { kEndToEndEager, kEndToEndGraph }) {
                    if (block == kEndToEndGraph && !graphs)
                        continue;
                    OutputJudgement j = judgeCheck(&host[block * nOut * kSlotCount], names, tolerances);
                    j.stats.distribution = block == kEndToEndEager ? "end-to-end:eager" : "end-to-end:graph";
                    j.stats.seed = verifySeed;
                    sr.checks.push_back(j.stats);
                }
            }
            for (std::size_t i = 0; i < nStages; ++i) {
                std::vector<std::string> stageOutputs;
                for (const auto& t : p.stages[i].problem.tensors)
                    if (t.role == TensorRole::Output)
                        stageOutputs.push_back(t.name);
                OutputJudgement j = judgeCheck(
                    &host[slotStart[i] * kSlotCount], stageOutputs, outputTolerances(*runs[i].problem, stageOutputs));
                j.stats.distribution = "stage:" + p.stages[i].name;
                j.stats.seed = verifySeed;
                sr.stages[i].check = j.stats;
            }
            sr.correct = true;
            for (const auto& c : sr.checks)
                sr.correct = sr.correct && c.passed;

            // The candidate's canaries after verification, and its inputs hashed before any timed launch.
            countCanaries();
            const std::uint64_t hashBefore = hashInputSlabs(m_harness, m_stream, slabs[kCandidate], scratch);
            // Every set of both variants run once, untimed: every intermediate holds what its stage wrote (integer
            // intermediates such as top-k indices must be valid before a stage is timed alone), and clocks are up.
            auto runEverySet = [&]() {
                for (int k = 0; k < sets; ++k) {
                    runAll(kCandidate, k);
                    runAll(kBaseline, k);
                }
                KL_CU(cuStreamSynchronize(m_stream));
            };
            runEverySet();

            // Timed re-checks: the pipeline's outputs in every set a batch wrote, against the references chained on
            // the pristine copy of that set's inputs (computed when first needed), as the time op re-checks.
            std::mt19937_64 rng(o.seed ^ 0x7157EEDull);
            std::vector<char> written(static_cast<std::size_t>(sets), 0), refReady(static_cast<std::size_t>(sets), 0);
            std::vector<int> checkedBatch;
            bool refSumDone = false;
            auto recheck = [&](int batchIndex) {
                const int c = static_cast<int>(checkedBatch.size());
                handoff(m_stream, m_hstream);
                std::vector<int> ks;
                for (int k = 0; k < sets; ++k)
                    if (written[static_cast<std::size_t>(k)])
                        ks.push_back(k);
                for (int k : ks) {
                    if (refReady[static_cast<std::size_t>(k)])
                        continue;
                    for (std::size_t i = 0; i < nStages; ++i) {
                        BufferMap m = refWork[i];
                        for (const auto& [tensor, b] : layout.stages[i].buffers)
                            m[tensor] = pristine[b].sets() ? hSets[b] + pristine[b].bufferOffset(k) : hBuf[b];
                        ref[i]->run(m_hstream, m);
                    }
                    refReady[static_cast<std::size_t>(k)] = 1;
                    for (std::size_t oi = 0; oi < nOut && !refSumDone; ++oi) {
                        const std::size_t b = layout.bufferOf(p.outputs[oi].source);
                        if (layout.buffers[b].elements)
                            m_harness.sumSquares(m_hstream, hSets[b] + pristine[b].bufferOffset(k),
                                layout.buffers[b].elements, layout.buffers[b].spec->dtype, hRefSumSq + 8 * oi);
                    }
                    refSumDone = true;
                }
                for (std::size_t oi = 0; oi < nOut; ++oi) {
                    const std::size_t b = layout.bufferOf(p.outputs[oi].source);
                    const PipelineBuffer& buf = layout.buffers[b];
                    std::vector<std::uint64_t> pairs;
                    for (int k : ks)
                        pairs.push_back(slabs[kCandidate][b].buffer(k));
                    for (int k : ks)
                        pairs.push_back(hSets[b] + pristine[b].bufferOffset(k));
                    const CUdeviceptr lists = hPairs + (static_cast<std::uint64_t>(c % 2) * nOut + oi) * sets * 16;
                    KL_CU(cuMemcpyHtoDAsync(lists, pairs.data(), pairs.size() * 8, m_hstream));
                    if (buf.elements && !ks.empty())
                        m_harness.comparePairs(m_hstream, lists, lists + ks.size() * 8, static_cast<int>(ks.size()),
                            buf.elements, buf.spec->dtype, HarnessKernels::poisonPattern(buf.spec->dtype, 0),
                            hSlots + (slotCount + static_cast<std::size_t>(c) * nOut + oi) * kSlotCount * 8,
                            hRefSumSq + 8 * oi, buf.elements);
                }
                handoff(m_hstream, m_stream);
                checkedBatch.push_back(batchIndex);
            };

            // Timed rounds: each item once per round on its set (the baseline half a rotation behind), the order
            // rotating so that no item always follows the same one; batches of `batch` rounds, with `beforeBatch`
            // and `afterBatch(index, last)` outside the timed intervals.
            using Item = std::function<void(int set)>;
            using Hook = std::function<void(int batchIndex, bool last)>;
            auto timeRounds
                = [&](const std::vector<Item>& items, const std::vector<int>& offsets, int minRounds, int maxRounds,
                      double maxSeconds, const std::function<bool(const std::vector<std::vector<double>>&)>& enough,
                      int batch, const Hook& beforeBatch, const Hook& afterBatch) {
                      std::vector<std::vector<double>> samples(items.size());
                      const std::size_t n = items.size();
                      const double start = nowSeconds();
                      for (int round = 0, batchIndex = 0;; ++batchIndex) {
                          beforeBatch(batchIndex, false);
                          for (int r = 0; r < batch; ++r, ++round)
                              for (std::size_t q = 0; q < n; ++q) {
                                  const std::size_t idx = (q + static_cast<std::size_t>(round)) % n;
                                  const std::size_t e = (static_cast<std::size_t>(r) * n + idx) * 2;
                                  KL_CU(cuEventRecord(gpu.event(e), m_stream));
                                  items[idx]((round + offsets[idx]) % sets);
                                  KL_CU(cuEventRecord(gpu.event(e + 1), m_stream));
                              }
                          KL_CU(cuStreamSynchronize(m_stream));
                          for (int r = 0; r < batch; ++r)
                              for (std::size_t idx = 0; idx < n; ++idx) {
                                  const std::size_t e = (static_cast<std::size_t>(r) * n + idx) * 2;
                                  float ms = 0;
                                  KL_CU(cuEventElapsedTime(&ms, gpu.events[e], gpu.events[e + 1]));
                                  samples[idx].push_back(static_cast<double>(ms) * 1000.0);
                              }
                          const bool last = round >= minRounds
                              && (round >= maxRounds || nowSeconds() - start > maxSeconds || enough(samples));
                          afterBatch(batchIndex, last);
                          if (last)
                              break;
                      }
                      return samples;
                  };
            const Hook noHook = [](int, bool) {};
            auto paired
                = [](const std::vector<double>& base, const std::vector<double>& cand, double* low, double* high) {
                      std::vector<double> ratios;
                      for (std::size_t i = 0; i < base.size() && i < cand.size(); ++i)
                          if (cand[i] > 0)
                              ratios.push_back(base[i] / cand[i]);
                      if (low && high)
                          medianConfidence(ratios, low, high);
                      return percentile(ratios, 0.5);
                  };
            const int half = sets / 2;
            {
                // The pipeline's eager run writes set r of round r and its graph set r + half: with at most `half`
                // rounds a batch, each output of the pipeline is written at most once between two poisonings, so
                // every timed launch finds its outputs and workspaces freshly initialised, as in the time op.
                std::vector<Item> items = { [&](int k) {
                                               written[static_cast<std::size_t>(k)] = 1;
                                               runAll(kCandidate, k);
                                           },
                    [&](int k) { runAll(kBaseline, k); } };
                std::vector<int> offsets = { 0, half };
                if (graphs) {
                    items.push_back([&](int k) {
                        written[static_cast<std::size_t>(k)] = 1;
                        KL_CU(cuGraphLaunch(pipelineGraph[kCandidate][k], m_stream));
                    });
                    items.push_back([&](int k) { KL_CU(cuGraphLaunch(pipelineGraph[kBaseline][k], m_stream)); });
                    offsets.push_back(half);
                    offsets.push_back(0);
                }
                const int batch = std::clamp(graphs ? half : sets, 1, 8);
                const std::size_t judged = graphs ? 2 : 0; // the CI target holds for the graph times when there are
                const auto s = timeRounds(
                    items, offsets, o.minSamples, o.maxSamples, o.maxSecondsPerShape,
                    [&](const std::vector<std::vector<double>>& x) {
                        return relativeHalfWidth(summarize(x[judged], graphs, 1)) <= o.targetRelHalfWidth
                            && relativeHalfWidth(summarize(x[judged + 1], graphs, 1)) <= o.targetRelHalfWidth;
                    },
                    batch,
                    [&](int, bool) {
                        poisonOutputs(kCandidate);
                        poisonOutputs(kBaseline);
                        evictDirtyL2(m_stream, scratch + 16);
                        std::fill(written.begin(), written.end(), 0);
                    },
                    [&](int batchIndex, bool last) {
                        countCanaries(); // before the next batch writes them again
                        // Which batches are re-checked is decided after they ran: the last, a random quarter of the
                        // others.
                        const int checked = static_cast<int>(checkedBatch.size());
                        if (checked < kMaxChecked && (last || (checked < kMaxChecked - 1 && rng() % 4 == 0)))
                            recheck(batchIndex);
                    });
                sr.eager = summarize(s[0], false, 1);
                sr.baselineEager = summarize(s[1], false, 1);
                sr.eagerSpeedup = paired(s[1], s[0], nullptr, nullptr);
                if (graphs) {
                    sr.graph = summarize(s[2], true, 1);
                    sr.baselineGraph = summarize(s[3], true, 1);
                    sr.speedup = paired(s[3], s[2], &sr.speedupCiLow, &sr.speedupCiHigh);
                } else {
                    sr.speedup = paired(s[1], s[0], &sr.speedupCiLow, &sr.speedupCiHigh);
                }
                for (auto* t : { &sr.eager, &sr.baselineEager, &sr.graph, &sr.baselineGraph })
                    if (*t) {
                        (*t)->inputSets = sets;
                        (*t)->device = m_nvml.latest();
                    }
            }
            // Each stage alone: its share of the pipeline, and whether it wins only with graphs off; the intermediates
            // it reads valid again first.
            runEverySet();
            for (std::size_t i = 0; i < nStages; ++i) {
                std::vector<Item> items
                    = { [&](int k) { runStage(kCandidate, i, k); }, [&](int k) { runStage(kBaseline, i, k); } };
                std::vector<int> offsets = { 0, half };
                std::vector<CUgraphExec> stageGraph[2];
                if (sr.stages[i].captured) {
                    for (int v : { kCandidate, kBaseline })
                        for (int k = 0; k < sets; ++k) {
                            CUgraphExec g = nullptr;
                            if (capture(
                                    m_stream, [&] { runStage(v, i, k); }, gpu, &g)
                                    .empty())
                                stageGraph[v].push_back(g);
                        }
                }
                const bool stageGraphs = stageGraph[kCandidate].size() == static_cast<std::size_t>(sets)
                    && stageGraph[kBaseline].size() == static_cast<std::size_t>(sets);
                if (stageGraphs) {
                    items.push_back([&](int k) { KL_CU(cuGraphLaunch(stageGraph[kCandidate][k], m_stream)); });
                    items.push_back([&](int k) { KL_CU(cuGraphLaunch(stageGraph[kBaseline][k], m_stream)); });
                    offsets.push_back(0);
                    offsets.push_back(half);
                }
                const auto s = timeRounds(
                    items, offsets, o.stageSamples, o.stageSamples, o.maxSecondsPerShape / static_cast<double>(nStages),
                    [](const std::vector<std::vector<double>>&) { return false; }, 8, noHook, noHook);
                PipelineStageResult& st = sr.stages[i];
                st.eager = summarize(s[0], false, 1);
                st.baselineEager = summarize(s[1], false, 1);
                if (stageGraphs) {
                    st.graph = summarize(s[2], true, 1);
                    st.baselineGraph = summarize(s[3], true, 1);
                }
            }
            // After the last timed launch: canaries, the input hash, and the verdicts of the re-checks.
            countCanaries();
            const bool inputsUnchanged = hashInputSlabs(m_harness, m_stream, slabs[kCandidate], scratch) == hashBefore;
            KL_CU(cuStreamSynchronize(m_hstream));
            std::vector<std::uint64_t> timed(timedSlots * kSlotCount);
            KL_CU(cuMemcpyDtoH(timed.data(), hSlots + slotCount * kSlotCount * 8, timed.size() * 8));
            sr.correct = judgeTimedChecks(timed.data(), nOut, checkedBatch, names, tolerances, o.seed, inputsUnchanged,
                             canaryBad, "the pipeline", "at " + shape.label(), sr.checks, result.reasons)
                && sr.correct;
            std::fprintf(stderr, "[worker] pipeline %s %s: sets %d, %s, %zu stages, %zu timed batches re-checked\n",
                p.name.c_str(), shape.label().c_str(), sets, graphs ? "graph" : "eager only", nStages,
                checkedBatch.size());
        } catch (const CudaError& e) {
            if (e.sticky())
                throw;
            addReason(result.reasons, reason("launch.failed", "pipeline at " + shape.label() + ": " + e.what()));
        }
        result.shapes.push_back(std::move(sr));
    }
    judgePipeline(result);
    return result;
}

} // namespace kl::worker
