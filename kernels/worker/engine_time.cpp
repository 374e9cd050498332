// The time op (kernels/HARNESS.md, "Timing"): candidate and baseline paired on rotating cold buffers, with timed
// outputs re-checked against the reference.
#include "kernels/stats.h"
#include "kernels/worker/correctness_slots.h"
#include "kernels/worker/cuda_check.h"
#include "kernels/worker/engine.h"
#include "kernels/worker/engine_buffers.h"

#include <algorithm>
#include <cmath>

namespace kl::worker {

TimeOutcome Engine::time(const LoadedProblem& lp, const Plan& candidate, const TimeOptions& o)
{
    TimeOutcome out;
    const Problem& p = lp.problem;
    std::mt19937_64 rng(o.seed ^ 0x7157EEDull);
    constexpr int kMaxChecked = 16;
    for (std::size_t si = 0; si < o.shapes.size(); ++si) {
        const Shape& shape = o.shapes[si];
        ShapeTiming st;
        st.result.shape = shape;
        std::unique_ptr<BoundPlan> cb, bb, rb;
        try {
            cb = candidate.bind(p, shape);
        } catch (const LaunchConfigError& e) {
            addReason(out.reasons, reason("launch.invalid-config", e.what()));
            out.shapes.push_back(std::move(st));
            continue;
        }
        if (o.withBaseline)
            bb = lp.baseline->bind(p, shape);
        rb = lp.reference->bind(p, shape);
        const auto sizes = tensorSizes(p, shape);
        std::vector<std::string> outputNames;
        std::uint64_t ioBytes = 0, perSetBytes = 0;
        const std::uint64_t guard = 2 * SlabLayout::kCanaryBytes + SlabLayout::kMaxGapUnits * kAlign;
        for (const auto& t : sizes) {
            ioBytes += t.bytes;
            const std::uint64_t b = alignUp(t.bytes, kAlign) + guard;
            // candidate's and baseline's buffers, and the harness's pristine inputs or references (both: in place)
            perSetBytes += (t.spec->role == TensorRole::InOut ? 4 : 3) * b;
            if (writesOutput(t.spec->role))
                outputNames.push_back(t.spec->name);
        }
        for (const auto& w : cb->workspaces())
            perSetBytes += alignUp(w.bytes, kAlign) + guard;
        if (bb)
            for (const auto& w : bb->workspaces())
                perSetBytes += alignUp(w.bytes, kAlign) + guard;
        std::uint64_t fixedBytes = 64ull << 20;
        for (const auto& w : rb->workspaces())
            fixedBytes += alignUp(w.bytes, kAlign) + kAlign;
        // Cold caches: rotate through input sets whose total exceeds 2x L2, so no memset sits in the timed loop.
        const std::uint64_t l2x2 = 2 * static_cast<std::uint64_t>(m_device.l2Bytes);
        // At least 4 sets, each tensor of each set at its own random offset: a streaming kernel's speed depends on
        // where its buffers sit relative to each other (DRAM channel and bank conflicts, about 1-2% on the H200),
        // and a median over several placements repeats across requests where one placement per request did not.
        // A request of few samples (a screen, which only ranks) takes 2: its large shapes' set-up was most of its cost.
        const std::uint64_t minSets = o.maxSamples < 8 ? 2 : 4;
        int sets = static_cast<int>(std::clamp<std::uint64_t>(
            (l2x2 + ioBytes - 1) / std::max<std::uint64_t>(ioBytes, 1) + 1, minSets, SlabLayout::kMaxSets - 64));
        std::size_t freeMem = 0, totalMem = 0;
        cuMemGetInfo(&freeMem, &totalMem);
        const std::uint64_t budget = (static_cast<std::uint64_t>(freeMem) + m_cand.capacity() + m_hmem.capacity()) / 2;
        while (sets > 1 && static_cast<std::uint64_t>(sets + 1) * perSetBytes + fixedBytes > budget)
            --sets;
        // Outputs (and workspaces) rotate with a period coprime to the inputs': a buffer meets new inputs each visit.
        const int outSets = outputRotationPeriod(sets, sets);
        st.inputSets = sets;
        st.outputSets = outSets;
        st.rotationBytes = static_cast<std::uint64_t>(sets) * ioBytes;

        // Candidate arena: candidate slabs and the baseline's own (pristine, never shared) slabs.
        const std::uint64_t gran = m_cand.granularity();
        std::vector<CandidateSlab> candSlabs, baseSlabs;
        std::uint64_t candBytes = 2 * gran;
        for (const auto& t : sizes) {
            candSlabs.push_back(tensorSlab(t, t.spec->role == TensorRole::Input ? sets : outSets, gran, m_rng));
            if (bb)
                baseSlabs.push_back(tensorSlab(t, sets, gran, m_rng));
        }
        for (const auto& w : cb->workspaces())
            candSlabs.push_back(workspaceSlab(w, outSets, gran, m_rng));
        if (bb)
            for (const auto& w : bb->workspaces())
                baseSlabs.push_back(workspaceSlab(w, sets, gran, m_rng));
        for (auto* v : { &candSlabs, &baseSlabs })
            for (const auto& cs : *v)
                candBytes += cs.layout.mappedBytes;
        KL_CU(cuStreamSynchronize(m_stream));
        KL_CU(cuStreamSynchronize(m_hstream));
        m_cand.reset(candBytes);
        for (auto* v : { &candSlabs, &baseSlabs })
            for (auto& cs : *v)
                cs.base = mapSlab(cs.layout);
        const CUdeviceptr scratch = m_cand.map(gran);
        std::vector<BufferMap> candIn(sets), candOut(outSets), baseIn(sets), baseOut(sets);
        for (const auto& cs : candSlabs)
            for (int k = 0; k < cs.layout.sets(); ++k)
                (cs.role == TensorRole::Input ? candIn : candOut)[k][cs.name] = cs.buffer(k);
        for (const auto& cs : baseSlabs)
            for (int k = 0; k < cs.layout.sets(); ++k)
                (cs.role == TensorRole::Input ? baseIn : baseOut)[k][cs.name] = cs.buffer(k);

        // Harness arena: pristine inputs, the reference's output for each input set (computed when a re-check first
        // needs it), slots and the compare's pointer lists.
        const int nOut = std::max<int>(1, static_cast<int>(outputNames.size()));
        std::map<std::string, SlabLayout> hInLayout, refLayout;
        std::map<std::string, CUdeviceptr> hInBase, refBase;
        std::uint64_t hBytes = fixedBytes + static_cast<std::uint64_t>(kMaxChecked) * nOut * kSlotCount * 8
            + 2ull * nOut * outSets * 8 * 2 + nOut * 8 * 2;
        int inOuts = 0;
        for (const auto& t : sizes) {
            if (readsInput(t.spec->role)) {
                hInLayout[t.spec->name] = packedSlab(t.bytes, sets);
                hBytes += hInLayout[t.spec->name].mappedBytes + kAlign;
            }
            if (writesOutput(t.spec->role)) {
                refLayout[t.spec->name] = packedSlab(t.bytes, sets);
                hBytes += refLayout[t.spec->name].mappedBytes + kAlign;
            }
            inOuts += t.spec->role == TensorRole::InOut ? 1 : 0;
        }
        // The restore's (pristine, candidate or baseline buffer) pointer lists: per in-place tensor and buffer.
        const std::uint64_t restoreListBytes = static_cast<std::uint64_t>(inOuts) * (outSets + sets) * 16;
        hBytes += restoreListBytes + kAlign;
        CUdeviceptr hSlots = 0, hPairs = 0, hRefSumSq = 0, hRestoreLists = 0;
        BufferMap refWork;
        std::vector<std::vector<BufferMap>> refBufs(1);
        {
            m_hmem.reset(hBytes, m_hstream);
            hSlots = m_hmem.alloc(static_cast<std::uint64_t>(kMaxChecked) * nOut * kSlotCount * 8);
            hPairs = m_hmem.alloc(2ull * nOut * outSets * 8 * 2);
            hRefSumSq = m_hmem.alloc(nOut * 8);
            hRestoreLists = m_hmem.alloc(std::max<std::uint64_t>(restoreListBytes, 16));
            KL_CU(
                cuMemsetD8Async(hSlots, 0, static_cast<std::uint64_t>(kMaxChecked) * nOut * kSlotCount * 8, m_hstream));
            KL_CU(cuMemsetD8Async(hRefSumSq, 0, nOut * 8, m_hstream));
            for (auto& [name, l] : hInLayout)
                hInBase[name] = m_hmem.alloc(l.mappedBytes);
            for (auto& [name, l] : refLayout)
                refBase[name] = m_hmem.alloc(l.mappedBytes);
            for (const auto& w : rb->workspaces())
                refWork[w.name] = m_hmem.alloc(std::max<std::uint64_t>(w.bytes, 4));
        }

        const double setupStart = nowSeconds();
        // Inputs: the same values (from seed and set) in the candidate's, the baseline's and the pristine slabs.
        // In-place tensors only in the pristine slab: every batch restores the candidate's and the baseline's from it.
        for (std::size_t ti = 0; ti < sizes.size(); ++ti) {
            const auto& t = sizes[ti];
            if (!readsInput(t.spec->role) || !t.elements)
                continue;
            const std::uint64_t seed = o.seed ^ (0x9E3779B97F4A7C15ull * (ti + 1));
            for (auto* v : { &candSlabs, &baseSlabs })
                for (const auto& cs : *v)
                    if (cs.name == t.spec->name && cs.role == TensorRole::Input)
                        m_harness.slabFillInput(
                            m_stream, cs.base, cs.layout, *t.spec, shape, t.elements, Distribution::Normal, seed);
            m_harness.slabFillInput(m_hstream, hInBase.at(t.spec->name), hInLayout.at(t.spec->name), *t.spec, shape,
                t.elements, Distribution::Normal, seed);
        }
        for (auto* v : { &candSlabs, &baseSlabs })
            for (const auto& cs : *v)
                m_harness.slabCanaryFill(m_stream, cs.base, cs.layout);
        // In-place tensors are restored on the candidate's stream from the pristine slabs filled on the harness's.
        if (inOuts)
            handoff(m_hstream, m_stream);
        // The candidate's input slabs, canaries included, hashed before anything ran and after the last launch.
        auto hashCandidateInputs = [&]() { return hashInputSlabs(m_harness, m_stream, candSlabs, scratch); };
        const std::uint64_t hashBefore = hashCandidateInputs();

        // Before every batch of timed launches (outside the timed intervals), for candidate and baseline alike:
        // outputs poisoned, workspaces poisoned unless the plan zeroes them, in-place tensors restored from the
        // pristine copy of the input set each buffer meets in the batch, canaries written again, the dirty lines
        // all of that left in L2 written back. A batch writes each
        // output buffer at most once, so every launch finds its outputs, workspaces and in-place tensors freshly
        // initialised. Which input set candidate buffer q meets: kl::inputSetOfNextWrite; the baseline's buffer b
        // always meets input set (b + sets / 2) mod sets.
        std::vector<int> lastInput(static_cast<std::size_t>(outSets), -1);
        std::uint64_t candLaunches = 0, baseLaunches = 0;
        auto restoreInOut = [&](bool graphs) {
            CUdeviceptr lists = hRestoreLists;
            for (const auto& t : sizes) {
                if (t.spec->role != TensorRole::InOut || !t.bytes)
                    continue;
                const CUdeviceptr pristine = hInBase.at(t.spec->name);
                const SlabLayout& pl = hInLayout.at(t.spec->name);
                for (auto* v : { &candSlabs, &baseSlabs })
                    for (const auto& cs : *v) {
                        if (cs.name != t.spec->name || cs.workspace)
                            continue;
                        const bool isBase = v == &baseSlabs;
                        const int n = cs.layout.sets();
                        std::vector<std::uint64_t> ptrs(2 * static_cast<std::size_t>(n));
                        for (int q = 0; q < n; ++q) {
                            const int k = isBase ? (q + sets / 2) % sets
                                                 : inputSetOfNextWrite(q, graphs, candLaunches, sets, outSets);
                            ptrs[static_cast<std::size_t>(q)] = pristine + pl.bufferOffset(k);
                            ptrs[static_cast<std::size_t>(n + q)] = cs.buffer(q);
                        }
                        // Pageable source: stream-ordered, and read before the call returns, so the lists can be
                        // reused.
                        KL_CU(cuMemcpyHtoDAsync(lists, ptrs.data(), ptrs.size() * 8, m_stream));
                        m_harness.copyPairs(m_stream, lists, lists + n * 8ull, n, t.bytes);
                        lists += ptrs.size() * 8;
                    }
            }
        };
        auto prepare = [&](bool graphs) {
            restoreInOut(graphs);
            prepareOutputSlabs(m_harness, m_stream, candSlabs); // in-place tensors are not outputs: not poisoned
            prepareOutputSlabs(m_harness, m_stream, baseSlabs);
            // The poison's write-back would otherwise drain during the first timed launches (5 us of 81 at
            // decode_attention B=16, whose workspaces are 3 x 8.5 MB): paid here, by neither side.
            evictDirtyL2(m_stream, scratch + 16);
            std::fill(lastInput.begin(), lastInput.end(), -1);
        };
        std::uint64_t canaryBad = 0;
        auto checkCanaries = [&]() { checkSlabCanaries(m_harness, m_stream, candSlabs, scratch + 8); };
        auto readCanaries = [&]() { // after a synchronize
            std::uint64_t bad = 0;
            KL_CU(cuMemcpyDtoH(&bad, scratch + 8, 8));
            canaryBad += bad;
        };

        std::vector<CUevent> events;
        auto eventAt = [&](std::size_t i) {
            while (events.size() <= i) {
                CUevent e;
                KL_CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
                events.push_back(e);
            }
            return events[i];
        };
        auto elapsedUs = [&](std::size_t a, std::size_t b) {
            float ms = 0;
            KL_CU(cuEventElapsedTime(&ms, events[a], events[b]));
            return static_cast<double>(ms) * 1000.0;
        };
        // Launch j of the candidate: input set j mod sets, output set j mod outSets. The baseline runs half a
        // rotation behind on its own buffers, so the second of a pair never finds the first's inputs in L2.
        auto launchCandidate = [&]() {
            const int k = static_cast<int>(candLaunches % sets), q = static_cast<int>(candLaunches % outSets);
            BufferMap b = candIn[k];
            b.insert(candOut[q].begin(), candOut[q].end());
            cb->run(m_stream, b);
            lastInput[q] = k;
            ++candLaunches;
        };
        auto launchBaseline = [&]() {
            const int k = static_cast<int>((baseLaunches + sets / 2) % sets);
            BufferMap b = baseIn[k];
            b.insert(baseOut[baseLaunches % sets].begin(), baseOut[baseLaunches % sets].end());
            bb->run(m_stream, b);
            ++baseLaunches;
        };
        int checked = 0;
        std::vector<int> checkedBatch;
        std::vector<char> refReady(static_cast<std::size_t>(sets), 0);
        bool refSumDone = false;
        // Every output the last batch wrote, compared with the reference on the pristine copy of the inputs that
        // launch read; the next batch's prepare() waits for the compare.
        auto recheckBatch = [&](int batchIndex) {
            handoff(m_stream, m_hstream);
            for (int q = 0; q < outSets; ++q) {
                const int k = lastInput[static_cast<std::size_t>(q)];
                if (k < 0 || refReady[static_cast<std::size_t>(k)])
                    continue;
                BufferMap b = refWork;
                for (const auto& t : sizes) {
                    b[t.spec->name] = t.spec->role == TensorRole::Input
                        ? hInBase.at(t.spec->name) + hInLayout.at(t.spec->name).bufferOffset(k)
                        : refBase.at(t.spec->name) + refLayout.at(t.spec->name).bufferOffset(k);
                    // In place: the reference updates a copy of the pristine values the candidate's launch started
                    // from.
                    if (t.spec->role == TensorRole::InOut && t.bytes)
                        KL_CU(cuMemcpyDtoDAsync(b.at(t.spec->name),
                            hInBase.at(t.spec->name) + hInLayout.at(t.spec->name).bufferOffset(k), t.bytes, m_hstream));
                }
                rb->run(m_hstream, b);
                refReady[static_cast<std::size_t>(k)] = 1;
                if (!refSumDone) {
                    int oi = 0;
                    for (const auto& t : sizes)
                        if (writesOutput(t.spec->role)) {
                            if (t.elements)
                                m_harness.sumSquares(
                                    m_hstream, b.at(t.spec->name), t.elements, t.spec->dtype, hRefSumSq + 8 * oi);
                            ++oi;
                        }
                    refSumDone = true;
                }
            }
            int oi = 0;
            for (const auto& t : sizes) {
                if (!writesOutput(t.spec->role))
                    continue;
                const CandidateSlab* cs = nullptr;
                for (const auto& c : candSlabs)
                    if (c.name == t.spec->name && !c.workspace)
                        cs = &c;
                std::vector<std::uint64_t> pairs;
                for (int q = 0; q < outSets; ++q)
                    if (lastInput[static_cast<std::size_t>(q)] >= 0)
                        pairs.push_back(cs->buffer(q));
                const std::size_t count = pairs.size();
                for (int q = 0; q < outSets; ++q)
                    if (const int k = lastInput[static_cast<std::size_t>(q)]; k >= 0)
                        pairs.push_back(refBase.at(t.spec->name) + refLayout.at(t.spec->name).bufferOffset(k));
                const CUdeviceptr lists = hPairs + static_cast<std::uint64_t>(checked % 2) * nOut * outSets * 16
                    + static_cast<std::uint64_t>(oi) * outSets * 16;
                KL_CU(cuMemcpyHtoDAsync(lists, pairs.data(), pairs.size() * 8, m_hstream));
                if (t.elements && count)
                    m_harness.comparePairs(m_hstream, lists, lists + count * 8, static_cast<int>(count), t.elements,
                        t.spec->dtype, HarnessKernels::poisonPattern(t.spec->dtype, 0),
                        hSlots + (static_cast<std::uint64_t>(checked) * nOut + oi) * kSlotCount * 8, hRefSumSq + 8 * oi,
                        t.elements);
                ++oi;
            }
            handoff(m_hstream, m_stream);
            checkedBatch.push_back(batchIndex);
            ++checked;
            // The lists are pageable host memory: the copy above has read them before cuMemcpyHtoDAsync returned.
        };

        try {
            // Estimate, also the warm-up of module, caches of instruction memory and clocks.
            std::vector<double> estC, estB;
            for (int i = 0; i < 5; ++i) {
                if (i % outSets == 0)
                    prepare(false);
                KL_CU(cuEventRecord(eventAt(0), m_stream));
                launchCandidate();
                KL_CU(cuEventRecord(eventAt(1), m_stream));
                if (bb)
                    launchBaseline();
                KL_CU(cuEventRecord(eventAt(2), m_stream));
                KL_CU(cuEventSynchronize(eventAt(2)));
                if (i >= 2) {
                    estC.push_back(elapsedUs(0, 1));
                    estB.push_back(elapsedUs(1, 2));
                }
            }
            const double tC = percentile(estC, 0.5);
            const double tB = bb ? percentile(estB, 0.5) : tC;
            const bool graphMode
                = o.graphMode == "always" || (o.graphMode == "auto" && std::min(tC, tB) < o.graphThresholdUs);

            struct Timed {
                bool isBase = false;
                std::vector<CUgraphExec> graphs;
                std::vector<std::vector<int>> graphInputs; // per graph, per launch: the input set (candidate)
                int perSample = 1;
                std::vector<double> samples;
            };
            // Graph g holds launches g*R .. g*R+R-1 of one cycle: within a batch each graph runs at most once, so each
            // output buffer is written at most once between two prepare() calls.
            auto buildGraphs = [&](Timed& t, int perSample) {
                t.perSample = std::clamp(perSample, 1, outSets);
                // Capped by the samples the request may take (a screen takes few): instantiating graphs it never
                // replays was most of a screen's set-up.
                const int groups = std::clamp(outSets / t.perSample, 1, std::clamp(o.maxSamples, 1, 32));
                for (int g = 0; g < groups; ++g) {
                    CUgraph graph = nullptr;
                    CUgraphExec exec = nullptr;
                    std::vector<int> inputsOfGraph;
                    KL_CU(cuStreamBeginCapture(m_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
                    try {
                        for (int r = 0; r < t.perSample; ++r) {
                            const int j = g * t.perSample + r;
                            const int k = t.isBase ? (j + sets / 2) % sets : j % sets;
                            BufferMap b = t.isBase ? baseIn[k] : candIn[k];
                            const BufferMap& ob = t.isBase ? baseOut[j % sets] : candOut[j];
                            b.insert(ob.begin(), ob.end());
                            (t.isBase ? bb : cb)->run(m_stream, b);
                            inputsOfGraph.push_back(k);
                        }
                    } catch (...) {
                        cuStreamEndCapture(m_stream, &graph);
                        if (graph)
                            cuGraphDestroy(graph);
                        throw;
                    }
                    KL_CU(cuStreamEndCapture(m_stream, &graph));
                    KL_CU(cuGraphInstantiate(&exec, graph, 0));
                    cuGraphDestroy(graph);
                    t.graphs.push_back(exec);
                    t.graphInputs.push_back(std::move(inputsOfGraph));
                }
            };
            auto launchGraph = [&](Timed& t, std::size_t g) {
                KL_CU(cuGraphLaunch(t.graphs[g], m_stream));
                if (!t.isBase)
                    for (std::size_t r = 0; r < t.graphInputs[g].size(); ++r)
                        lastInput[g * t.perSample + r] = t.graphInputs[g][r];
            };
            auto perSampleFor = [&](double us) {
                return std::clamp(static_cast<int>(std::ceil(200.0 / std::max(us, 0.5))), 1, 1000);
            };
            Timed cand, base;
            base.isBase = true;
            int batchCap = 1; // samples per batch
            if (graphMode) {
                const int per = perSampleFor(std::min(tC, tB));
                buildGraphs(cand, per);
                if (bb)
                    buildGraphs(base, per);
                batchCap = static_cast<int>(cand.graphs.size());
            } else {
                // A few back-to-back launches per event pair: an event between every launch adds a launch bubble
                // (~2-3 us) that is not the kernel's time.
                const int per = std::clamp(
                    static_cast<int>(std::ceil(300.0 / std::max(std::min(tC, tB), 1.0))), 1, std::min(16, outSets));
                cand.perSample = per;
                base.perSample = per;
                batchCap = std::max(1, outSets / per);
            }
            const double setupMs = (nowSeconds() - setupStart) * 1e3;
            int sampleIndex = 0;
            auto enqueue = [&](Timed& t, std::size_t e0) {
                KL_CU(cuEventRecord(eventAt(e0), m_stream));
                if (graphMode) {
                    const std::size_t g = t.graphs.size();
                    launchGraph(t, static_cast<std::size_t>(sampleIndex) % g);
                } else {
                    for (int r = 0; r < t.perSample; ++r) {
                        if (t.isBase)
                            launchBaseline();
                        else
                            launchCandidate();
                    }
                }
                KL_CU(cuEventRecord(eventAt(e0 + 1), m_stream));
            };
            // Warm-up at the sample rate, untimed.
            prepare(graphMode);
            for (int i = 0; i < std::min(3, batchCap); ++i) {
                enqueue(cand, 0);
                if (bb)
                    enqueue(base, 2);
                ++sampleIndex;
            }
            KL_CU(cuStreamSynchronize(m_stream));
            st.before = m_nvml.latest();
            m_nvml.beginWindow();
            const double start = nowSeconds();
            const double pairUs = cand.perSample * (tC + (bb ? tB : 0));
            const int fullBatch
                = std::min(batchCap, std::clamp(static_cast<int>(std::ceil(5000.0 / std::max(pairUs, 1.0))), 4, 64));
            for (int batchIndex = 0;; ++batchIndex) {
                // Never more samples than the request allows: a batch of a screen is its remaining samples.
                const int batch
                    = std::max(1, std::min(fullBatch, o.maxSamples - static_cast<int>(cand.samples.size())));
                prepare(graphMode);
                for (int b = 0; b < batch; ++b) {
                    // Alternate which goes first so neither always runs right after the other's cache state.
                    const std::size_t e = static_cast<std::size_t>(b) * 4;
                    if (bb && (sampleIndex & 1)) {
                        enqueue(base, e + 2);
                        enqueue(cand, e);
                    } else {
                        enqueue(cand, e);
                        if (bb)
                            enqueue(base, e + 2);
                    }
                    ++sampleIndex;
                }
                checkCanaries();
                KL_CU(cuStreamSynchronize(m_stream));
                readCanaries();
                for (int b = 0; b < batch; ++b) {
                    const std::size_t e = static_cast<std::size_t>(b) * 4;
                    cand.samples.push_back(elapsedUs(e, e + 1) / cand.perSample);
                    if (bb)
                        base.samples.push_back(elapsedUs(e + 2, e + 3) / base.perSample);
                }
                const int n = static_cast<int>(cand.samples.size());
                bool done = false;
                if (n >= o.minSamples) {
                    const auto tc = summarize(cand.samples, graphMode, cand.perSample);
                    done = relativeHalfWidth(tc) <= o.targetRelHalfWidth;
                    if (bb)
                        done = done
                            && relativeHalfWidth(summarize(base.samples, graphMode, base.perSample))
                                <= o.targetRelHalfWidth;
                    done = done || n >= o.maxSamples || nowSeconds() - start > o.maxSecondsPerShape;
                }
                // Which batches are re-checked is decided only after they ran: the last one, and a random quarter of
                // the others (kMaxChecked in all).
                if (o.recheck && checked < kMaxChecked && (done ? true : checked < kMaxChecked - 1 && rng() % 4 == 0))
                    recheckBatch(batchIndex);
                if (done)
                    break;
            }
            st.after = m_nvml.window();
            st.throttled = st.before.throttled() || st.after.throttled();
            const double measureMs = (nowSeconds() - start) * 1e3;
            const double tailStart = nowSeconds();
            st.result.timing = summarize(cand.samples, graphMode, cand.perSample);
            st.candidateSamplesUs = cand.samples;
            if (bb) {
                st.result.baselineTiming = summarize(base.samples, graphMode, base.perSample);
                st.baselineSamplesUs = base.samples;
                // Paired ratios: each candidate sample with the baseline sample taken next to it.
                std::vector<double> ratios;
                for (std::size_t i = 0; i < cand.samples.size() && i < base.samples.size(); ++i)
                    if (cand.samples[i] > 0)
                        ratios.push_back(base.samples[i] / cand.samples[i]);
                st.result.speedup = percentile(ratios, 0.5);
                medianConfidence(ratios, &st.result.speedupCiLow, &st.result.speedupCiHigh);
            }
            for (auto g : cand.graphs)
                cuGraphExecDestroy(g);
            for (auto g : base.graphs)
                cuGraphExecDestroy(g);

            // The whole plan under graph replay is part of the record, so turning graphs off never looks faster.
            if (graphMode) {
                st.result.graphTiming = st.result.timing;
            } else if (o.graphTiming) {
                Timed g;
                try {
                    buildGraphs(g, perSampleFor(tC));
                    for (int i = 0; i < 12; ++i) {
                        if (i % static_cast<int>(g.graphs.size()) == 0)
                            prepare(true);
                        KL_CU(cuEventRecord(eventAt(2 * i), m_stream));
                        launchGraph(g, static_cast<std::size_t>(i) % g.graphs.size());
                        KL_CU(cuEventRecord(eventAt(2 * i + 1), m_stream));
                    }
                    KL_CU(cuStreamSynchronize(m_stream));
                    for (int i = 0; i < 12; ++i)
                        g.samples.push_back(elapsedUs(2 * i, 2 * i + 1) / g.perSample);
                    st.result.graphTiming = summarize(g.samples, true, g.perSample);
                } catch (const CudaError& e) {
                    if (e.sticky())
                        throw;
                    addReason(out.reasons, reason("graph.capture-failed", std::string("graph timing: ") + e.what()));
                }
                for (auto x : g.graphs)
                    cuGraphExecDestroy(x);
            }

            checkCanaries();
            KL_CU(cuStreamSynchronize(m_stream));
            readCanaries();
            const bool inputsUnchanged = hashCandidateInputs() == hashBefore;
            KL_CU(cuStreamSynchronize(m_hstream));
            st.checkedBatches = checked;
            std::vector<std::uint64_t> host(static_cast<std::size_t>(checked) * nOut * kSlotCount);
            if (checked)
                KL_CU(cuMemcpyDtoH(host.data(), hSlots, host.size() * 8));
            const bool allOk = judgeTimedChecks(host.data(), static_cast<std::size_t>(nOut), checkedBatch, outputNames,
                outputTolerances(lp, outputNames), o.seed, inputsUnchanged, canaryBad, "the candidate",
                "on shape " + shape.label(), st.result.checks, out.reasons);
            st.result.correct = allOk;
            std::fprintf(stderr,
                "[worker] time %s: sets %d/%d %s x%d samples %d checked %d setup %.1f ms measure %.1f ms tail %.1f "
                "ms\n",
                shape.label().c_str(), sets, outSets, graphMode ? "graph" : "events", cand.perSample,
                static_cast<int>(cand.samples.size()), checked, setupMs, measureMs, (nowSeconds() - tailStart) * 1e3);
        } catch (const CudaError& e) {
            for (auto ev : events)
                cuEventDestroy(ev);
            if (e.sticky())
                throw;
            addReason(out.reasons, reason("launch.failed", std::string("timing: ") + e.what()));
            out.shapes.push_back(std::move(st));
            continue;
        }
        for (auto ev : events)
            cuEventDestroy(ev);
        out.shapes.push_back(std::move(st));
    }
    return out;
}

} // namespace kl::worker
