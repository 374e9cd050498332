// The verify op (kernels/HARNESS.md, "Verification") and the calibration of each output's tolerance.
#include "core/errors.h"
#include "kernels/worker/correctness_slots.h"
#include "kernels/worker/cuda_check.h"
#include "kernels/worker/cupti_kernel_log.h"
#include "kernels/worker/engine.h"
#include "kernels/worker/engine_buffers.h"
#include "kernels/worker/launch_plans.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace kl::worker {

namespace {

    struct CheckSpec {
        std::string name;
        Distribution dist;
        std::uint64_t seed;
        int inputSet; // 0: P, 1: P'
        int outputSet; // 0: Q, 1: Q'
        int refSet; // 0: R1, 1: R2
        bool computeRef;
        int poisonVariant;
    };

    constexpr std::uint64_t kDistributionChecksMaxBytes = 1ull << 30;

} // namespace

std::vector<Tolerance> Engine::outputTolerances(const LoadedProblem& lp, const std::vector<std::string>& names) const
{
    std::vector<Tolerance> out;
    for (const auto& n : names) {
        auto it = lp.tolerances.find(n);
        const TensorSpec* t = lp.problem.tensor(n);
        out.push_back(
            it != lp.tolerances.end() ? it->second.tolerance : lp.problem.toleranceFor(t ? t->dtype : DType::F32));
    }
    return out;
}

void Engine::calibrateTolerances(LoadedProblem& lp)
{
    const Problem& p = lp.problem;
    for (const auto& t : p.tensors)
        if (writesOutput(t.role)) {
            OutputTolerance ot;
            ot.dtype = t.dtype;
            ot.stated = p.toleranceFor(t.dtype);
            ot.tolerance = ot.stated;
            lp.tolerances[t.name] = ot;
        }
    // Calibration inputs: the visible verify shapes that stay small, every value distribution the checks use.
    std::vector<Shape> shapes;
    for (const auto& s : p.verifyShapes) {
        std::uint64_t bytes = 0;
        for (const auto& t : tensorSizes(p, s))
            bytes += t.bytes;
        if (bytes <= (256ull << 20))
            shapes.push_back(s);
    }
    if (shapes.empty() && !p.verifyShapes.empty())
        shapes.push_back(p.verifyShapes.front());
    std::map<std::string, double> relL2, maxAbs;
    std::uint64_t seed = 0xCA11B8A7Eull;
    for (const auto& shape : shapes) {
        std::unique_ptr<BoundPlan> r64, r32;
        try {
            r64 = lp.reference->bind(p, shape);
            r32 = lp.referenceFp32->bind(p, shape);
        } catch (const LaunchConfigError&) {
            continue;
        }
        const auto sizes = tensorSizes(p, shape);
        std::uint64_t need = 64 * kSlotCount * 8;
        for (const auto& t : sizes)
            need += ((readsInput(t.spec->role) ? 1 : 0) + (writesOutput(t.spec->role) ? 2 : 0))
                * (alignUp(std::max<std::uint64_t>(t.bytes, 4), kAlign));
        for (const auto* b : { r64.get(), r32.get() })
            for (const auto& w : b->workspaces())
                need += alignUp(std::max<std::uint64_t>(w.bytes, 4), kAlign);
        m_hmem.reset(need, m_hstream);
        const int nOut = static_cast<int>(lp.tolerances.size());
        const CUdeviceptr slots = m_hmem.alloc(3 * static_cast<std::uint64_t>(nOut) * kSlotCount * 8);
        KL_CU(cuMemsetD8Async(slots, 0, 3 * static_cast<std::uint64_t>(nOut) * kSlotCount * 8, m_hstream));
        BufferMap in, out64, out32, w64, w32;
        for (const auto& t : sizes) {
            if (readsInput(t.spec->role))
                in[t.spec->name] = m_hmem.alloc(std::max<std::uint64_t>(t.bytes, 4));
            if (writesOutput(t.spec->role)) {
                out64[t.spec->name] = m_hmem.alloc(std::max<std::uint64_t>(t.bytes, 4));
                out32[t.spec->name] = m_hmem.alloc(std::max<std::uint64_t>(t.bytes, 4));
            }
        }
        for (const auto& w : r64->workspaces())
            w64[w.name] = m_hmem.alloc(std::max<std::uint64_t>(w.bytes, 4));
        for (const auto& w : r32->workspaces())
            w32[w.name] = m_hmem.alloc(std::max<std::uint64_t>(w.bytes, 4));
        const Distribution dists[3] = { Distribution::Normal, Distribution::Large, Distribution::Outliers };
        for (int d = 0; d < 3; ++d) {
            for (std::size_t ti = 0; ti < sizes.size(); ++ti)
                if (readsInput(sizes[ti].spec->role) && sizes[ti].elements)
                    m_harness.fillInput(m_hstream, in.at(sizes[ti].spec->name), *sizes[ti].spec, shape,
                        sizes[ti].elements, dists[d], seed ^ (0x9E3779B97F4A7C15ull * (ti + 1)));
            // An in-place tensor starts from the pristine values in each build's own output buffer.
            for (const auto& t : sizes)
                if (t.spec->role == TensorRole::InOut && t.bytes)
                    for (const BufferMap* o : { &out64, &out32 })
                        KL_CU(cuMemcpyDtoDAsync(o->at(t.spec->name), in.at(t.spec->name), t.bytes, m_hstream));
            BufferMap a = out64, b = out32; // std::map::insert keeps these entries over the pristine ones
            a.insert(w64.begin(), w64.end());
            a.insert(in.begin(), in.end());
            b.insert(w32.begin(), w32.end());
            b.insert(in.begin(), in.end());
            r64->run(m_hstream, a);
            r32->run(m_hstream, b);
            int oi = 0;
            for (const auto& t : sizes) {
                if (!writesOutput(t.spec->role))
                    continue;
                const CUdeviceptr sl = slots + (static_cast<std::uint64_t>(d) * nOut + oi++) * kSlotCount * 8;
                if (!t.elements)
                    continue;
                m_harness.sumSquares(m_hstream, out64.at(t.spec->name), t.elements, t.spec->dtype, sl + kRefSumSq * 8);
                m_harness.compare(m_hstream, out32.at(t.spec->name), out64.at(t.spec->name), t.elements, t.spec->dtype,
                    HarnessKernels::poisonPattern(t.spec->dtype, 0), sl, sl + kRefSumSq * 8);
            }
        }
        std::vector<std::uint64_t> host(3 * static_cast<std::size_t>(nOut) * kSlotCount);
        KL_CU(cuStreamSynchronize(m_hstream));
        KL_CU(cuMemcpyDtoH(host.data(), slots, host.size() * 8));
        for (int d = 0; d < 3; ++d) {
            int oi = 0;
            for (const auto& t : sizes) {
                if (!writesOutput(t.spec->role))
                    continue;
                const OutputError e = readOutputError(&host[(static_cast<std::size_t>(d) * nOut + oi++) * kSlotCount]);
                const bool bad = e.nonFinite || e.poisonLeft;
                relL2[t.spec->name] = std::max(relL2[t.spec->name], bad ? INFINITY : e.relL2);
                maxAbs[t.spec->name] = std::max(maxAbs[t.spec->name], bad ? INFINITY : e.maxAbs);
            }
        }
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    }
    for (auto& [name, ot] : lp.tolerances) {
        if (!relL2.count(name))
            continue; // no calibration shape ran: the stated tolerance stands
        ot.measuredRelL2 = relL2[name];
        ot.measuredMaxAbs = maxAbs[name];
        ot.tolerance = measuredTolerance(ot.dtype, ot.stated, ot.measuredRelL2, ot.measuredMaxAbs);
        std::fprintf(stderr,
            "[worker] %s output %s: fp32 reference vs fp64 rel_l2 %.3g max %.3g -> tolerance %.3g / %.3g\n",
            p.name.c_str(), name.c_str(), ot.measuredRelL2, ot.measuredMaxAbs, ot.tolerance.relL2, ot.tolerance.maxAbs);
    }
}

VerifyOutcome Engine::verify(const LoadedProblem& lp, const Plan& candidate, const VerifyOptions& o)
{
    VerifyOutcome out;
    const double verifyStart = nowSeconds();
    const Problem& p = lp.problem;
    auto& ledger = launchLedger();
    const bool cupti = o.cupti && CuptiKernelLog::instance().available();
    if (cupti) {
        KL_CU(cuStreamSynchronize(m_stream));
        KL_CU(cuStreamSynchronize(m_hstream));
        ledger.launched.clear();
        ledger.active = true;
        CuptiKernelLog::instance().start();
    }
    std::set<std::string> candidateSymbols;
    bool anyVisibleFailed = false;
    bool anyHeldOutFailed = false;

    for (std::size_t si = 0; si < o.shapes.size(); ++si) {
        const Shape& shape = o.shapes[si];
        const double shapeStart = nowSeconds();
        ShapeResult sr;
        sr.shape = shape;
        sr.heldOut = si < o.heldOut.size() && o.heldOut[si];
        const std::string where = sr.heldOut ? std::string("a held-out shape") : "shape " + shape.label();
        std::unique_ptr<BoundPlan> cb, rb;
        try {
            cb = candidate.bind(p, shape);
        } catch (const LaunchConfigError& e) {
            sr.correct = false;
            addReason(out.reasons,
                reason("launch.invalid-config",
                    sr.heldOut ? "the launch plan cannot run a held-out shape of the validity range" : e.what()));
            (sr.heldOut ? anyHeldOutFailed : anyVisibleFailed) = true;
            sr.verifyMs = (nowSeconds() - shapeStart) * 1e3;
            out.shapes.push_back(sr);
            continue;
        }
        for (const auto& s : cb->symbols())
            candidateSymbols.insert(s);
        rb = lp.reference->bind(p, shape);

        const auto sizes = tensorSizes(p, shape);
        // Candidate side: every tensor and workspace a slab of two sets (P/P', Q/Q') behind unmapped guards.
        std::vector<CandidateSlab> slabs;
        std::uint64_t candBytes = 2 * m_cand.granularity();
        for (const auto& t : sizes)
            slabs.push_back(tensorSlab(t, 2, m_cand.granularity(), m_rng));
        for (const auto& w : cb->workspaces())
            slabs.push_back(workspaceSlab(w, 2, m_cand.granularity(), m_rng));
        for (const auto& cs : slabs)
            candBytes += cs.layout.mappedBytes;
        KL_CU(cuStreamSynchronize(m_stream));
        m_cand.reset(candBytes);
        for (auto& cs : slabs)
            cs.base = mapSlab(cs.layout);
        // Integrity words the harness's kernels write in the candidate arena after the candidate ran; each is
        // zeroed right before and copied to the harness's slots right after, so nothing the candidate left counts.
        const CUdeviceptr scratch = m_cand.map(m_cand.granularity());
        BufferMap inputs[2], outputs[2], work[2];
        std::vector<std::string> outputNames;
        for (const auto& cs : slabs)
            for (int set = 0; set < 2; ++set)
                (cs.workspace ? work : cs.role == TensorRole::Input ? inputs : outputs)[set][cs.name] = cs.buffer(set);
        for (const auto& t : sizes)
            if (writesOutput(t.spec->role))
                outputNames.push_back(t.spec->name);
        const int nOut = std::max<int>(1, static_cast<int>(outputNames.size()));
        const std::vector<Tolerance> tolerances = outputTolerances(lp, outputNames);

        // Harness side: pristine inputs, reference outputs, copies of the candidate's outputs, slots.
        const int nChecks = 6;
        const std::uint64_t slotBytes = static_cast<std::uint64_t>(nChecks) * nOut * kSlotCount * 8;
        const std::uint64_t refStatBytes = static_cast<std::uint64_t>(nChecks) * 8 * nOut;
        std::uint64_t hBytes = slotBytes + refStatBytes + 16 * kAlign;
        for (const auto& t : sizes)
            hBytes += ((readsInput(t.spec->role) ? 1 : 0) + (writesOutput(t.spec->role) ? 2 : 0))
                * (alignUp(std::max<std::uint64_t>(t.bytes, 4), kAlign) + kAlign);
        for (const auto& w : rb->workspaces())
            hBytes += alignUp(std::max<std::uint64_t>(w.bytes, 4), kAlign) + kAlign;
        BufferMap hInputs, refs[2], refWork;
        CUdeviceptr slots = 0, refStatArea = 0;
        {
            m_hmem.reset(hBytes, m_hstream);
            slots = m_hmem.alloc(slotBytes + refStatBytes);
            refStatArea = slots + slotBytes;
            KL_CU(cuMemsetD8Async(slots, 0, slotBytes + refStatBytes, m_hstream));
            for (const auto& t : sizes) {
                const std::uint64_t b = std::max<std::uint64_t>(t.bytes, 4);
                if (readsInput(t.spec->role))
                    hInputs[t.spec->name] = m_hmem.alloc(b);
                if (writesOutput(t.spec->role)) {
                    refs[0][t.spec->name] = m_hmem.alloc(b);
                    refs[1][t.spec->name] = m_hmem.alloc(b);
                }
            }
            for (const auto& w : rb->workspaces())
                refWork[w.name] = m_hmem.alloc(std::max<std::uint64_t>(w.bytes, 4));
        }
        auto slotOf = [&](int check, int output) {
            return slots + (static_cast<std::uint64_t>(check) * nOut + output) * kSlotCount * 8;
        };

        const std::uint64_t seedA = o.seed ^ (0x51ED2701ull * (si + 1));
        std::vector<CheckSpec> checks = {
            { "order:A", Distribution::Normal, seedA, 0, 0, 0, true, 0 },
            { "order:B", Distribution::Normal, seedA ^ 0xB0B0B0B0ull, 0, 0, 1, true, 1 },
            { "order:A'", Distribution::Normal, seedA, 1, 1, 0, false, 1 },
        };
        // The value distributions are shape-independent numerics: a working set over kDistributionChecksMaxBytes
        // (the range's largest extremes, there for index overflow) runs the order checks and the graph replay,
        // every smaller shape all of them. The largest extreme was most of a verification's GPU time.
        std::uint64_t shapeBytes = 0;
        for (const auto& t : sizes)
            shapeBytes += t.bytes;
        if (shapeBytes <= kDistributionChecksMaxBytes) {
            checks.push_back({ "large", Distribution::Large, seedA ^ 0x1A26Eull, 0, 0, 1, true, 0 });
            checks.push_back({ "outliers", Distribution::Outliers, seedA ^ 0x0D71E25ull, 0, 0, 1, true, 1 });
        }
        auto merged = [](const BufferMap& a, const BufferMap& b, const BufferMap& c) {
            BufferMap m = a;
            m.insert(b.begin(), b.end());
            m.insert(c.begin(), c.end());
            return m;
        };
        // The same counter-based values in the candidate's buffers and the harness's pristine copy. In-place tensors
        // are filled before every launch (their buffer holds the previous launch's result), the others whenever the
        // check's values change.
        auto fillInputs = [&](int set, Distribution dist, std::uint64_t seed, bool harnessToo, bool inOutOnly = false) {
            for (std::size_t ti = 0; ti < sizes.size(); ++ti) {
                const auto& t = sizes[ti];
                if (!readsInput(t.spec->role) || t.elements == 0 || (inOutOnly && t.spec->role != TensorRole::InOut))
                    continue;
                const std::uint64_t s = seed ^ (0x9E3779B97F4A7C15ull * (ti + 1));
                const BufferMap& candidateSide = t.spec->role == TensorRole::Input ? inputs[set] : outputs[set];
                m_harness.fillInput(m_stream, candidateSide.at(t.spec->name), *t.spec, shape, t.elements, dist, s);
                if (harnessToo)
                    m_harness.fillInput(m_hstream, hInputs.at(t.spec->name), *t.spec, shape, t.elements, dist, s);
            }
        };
        // Before every candidate launch: outputs poisoned, workspaces poisoned (or zeroed by the plan), every
        // canary of every slab written again.
        auto prepareLaunch = [&](int set, int variant) {
            for (const auto& cs : slabs) {
                if (cs.role == TensorRole::Output && !cs.workspace && cs.elements)
                    m_harness.poison(m_stream, cs.buffer(set), cs.elements, cs.dtype,
                        HarnessKernels::poisonPattern(cs.dtype, variant));
                if (cs.workspace && !cs.zeroInit && cs.elements)
                    m_harness.poison(m_stream, cs.buffer(set), cs.elements, DType::I32,
                        kWorkspacePoison ^ static_cast<unsigned>(variant));
                m_harness.slabCanaryFill(m_stream, cs.base, cs.layout);
            }
        };
        auto hashInputs = [&](int set, int word) {
            KL_CU(cuMemsetD8Async(scratch + word * 8, 0, 8, m_stream));
            for (std::size_t ti = 0; ti < sizes.size(); ++ti)
                if (sizes[ti].spec->role == TensorRole::Input)
                    m_harness.hash(m_stream, inputs[set].at(sizes[ti].spec->name), sizes[ti].bytes, ti * 0x100000001ull,
                        scratch + word * 8);
        };
        auto toHarness = [&](CUdeviceptr dst, CUdeviceptr src, std::uint64_t bytes) {
            KL_CU(cuMemcpyDtoDAsync(dst, src, bytes, m_stream));
        };
        // Each reference output's sum of squares, once per reference run: refStats[refSet] + 8 * output index.
        CUdeviceptr refStats[2] = { 0, 0 };
        // An in-place tensor: the reference updates a copy of the pristine values in its own output buffer.
        auto runReference = [&](int refSet, CUdeviceptr area) {
            for (const auto& t : sizes)
                if (t.spec->role == TensorRole::InOut && t.bytes)
                    KL_CU(
                        cuMemcpyDtoDAsync(refs[refSet].at(t.spec->name), hInputs.at(t.spec->name), t.bytes, m_hstream));
            rb->run(m_hstream, merged(refs[refSet], refWork, hInputs));
            int oi = 0;
            for (const auto& t : sizes)
                if (writesOutput(t.spec->role)) {
                    if (t.elements)
                        m_harness.sumSquares(
                            m_hstream, refs[refSet].at(t.spec->name), t.elements, t.spec->dtype, area + 8 * oi);
                    ++oi;
                }
            refStats[refSet] = area;
        };
        // After the candidate: integrity words into the harness's slots, then its outputs compared where they are
        // (the candidate has finished; nothing it can run sees the reference or the slots).
        auto judgeLaunch = [&](int check, int set, int outSet, int refSet, int variant) {
            hashInputs(set, 1);
            KL_CU(cuMemsetD8Async(scratch + 16, 0, 8, m_stream));
            for (const auto& cs : slabs)
                m_harness.slabCanaryCheck(m_stream, cs.base, cs.layout, scratch + 16);
            toHarness(slotOf(check, 0) + kHashAfter * 8, scratch + 8, 8);
            toHarness(slotOf(check, 0) + kCanaryBad * 8, scratch + 16, 8);
            handoff(m_stream, m_hstream);
            int oi = 0;
            for (const auto& t : sizes)
                if (writesOutput(t.spec->role)) {
                    if (t.elements)
                        m_harness.compare(m_hstream, outputs[outSet].at(t.spec->name), refs[refSet].at(t.spec->name),
                            t.elements, t.spec->dtype, HarnessKernels::poisonPattern(t.spec->dtype, variant),
                            slotOf(check, oi), refStats[refSet] + 8 * oi);
                    ++oi;
                }
            // The next launch re-poisons these outputs: it waits until the compare has read them.
            handoff(m_hstream, m_stream);
        };

        bool launchFailed = false;
        std::string launchError;
        int checksRun = 0;
        for (std::size_t ci = 0; ci < checks.size(); ++ci) {
            const auto& c = checks[ci];
            fillInputs(c.inputSet, c.dist, c.seed, c.computeRef);
            if (c.computeRef)
                runReference(c.refSet, refStatArea + ci * 8 * nOut);
            prepareLaunch(c.outputSet, c.poisonVariant);
            hashInputs(c.inputSet, 0);
            toHarness(slotOf(static_cast<int>(ci), 0) + kHashBefore * 8, scratch, 8);
            try {
                cb->run(m_stream, merged(inputs[c.inputSet], outputs[c.outputSet], work[c.outputSet]));
            } catch (const CudaError& e) {
                if (e.sticky())
                    throw;
                launchFailed = true;
                launchError = e.what();
                break;
            }
            judgeLaunch(static_cast<int>(ci), c.inputSet, c.outputSet, c.refSet, c.poisonVariant);
            ++checksRun;
        }

        // Graph safety: the whole plan captured into a CUDA graph and replayed on the A inputs.
        bool graphFailed = false;
        std::string graphError;
        const int graphCheck = 5;
        if (!launchFailed && o.graphCheck) {
            CUgraph graph = nullptr;
            CUgraphExec exec = nullptr;
            const bool wasActive = ledger.active;
            ledger.active = false;
            KL_CU(cuStreamSynchronize(m_stream));
            CUresult r = cuStreamBeginCapture(m_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
            if (r == CUDA_SUCCESS) {
                try {
                    cb->run(m_stream, merged(inputs[1], outputs[1], work[1]));
                } catch (const CudaError& e) {
                    graphError = e.what();
                }
                const CUresult r2 = cuStreamEndCapture(m_stream, &graph);
                if (r2 != CUDA_SUCCESS && graphError.empty())
                    graphError = cuErrorText(r2);
                if (graphError.empty()) {
                    const CUresult r3 = cuGraphInstantiate(&exec, graph, 0);
                    if (r3 != CUDA_SUCCESS)
                        graphError = cuErrorText(r3);
                }
            } else {
                graphError = cuErrorText(r);
            }
            ledger.active = wasActive;
            if (!graphError.empty()) {
                graphFailed = true;
            } else {
                fillInputs(1, Distribution::Normal, seedA, false, true);
                prepareLaunch(1, 0);
                hashInputs(1, 0);
                toHarness(slotOf(graphCheck, 0) + kHashBefore * 8, scratch, 8);
                KL_CU(cuGraphLaunch(exec, m_stream));
                // Kernels replayed from the graph show up in CUPTI too.
                noteGraphReplay(*cb);
                judgeLaunch(graphCheck, 1, 1, 0, 0);
            }
            if (exec)
                cuGraphExecDestroy(exec);
            if (graph)
                cuGraphDestroy(graph);
        }
        KL_CU(cuStreamSynchronize(m_stream));
        KL_CU(cuStreamSynchronize(m_hstream));
        std::vector<std::uint64_t> host(static_cast<std::size_t>(nChecks) * nOut * kSlotCount);
        {
            KL_CU(cuMemcpyDtoH(host.data(), slots, host.size() * 8));
        }

        bool firstPassed = false, laterFailed = false;
        auto evaluateCheck = [&](int ci, const std::string& name, std::uint64_t seed) {
            const std::uint64_t* s = &host[static_cast<std::size_t>(ci) * nOut * kSlotCount];
            OutputJudgement j = judgeCheck(s, outputNames, tolerances);
            CorrectnessStats& cs = j.stats;
            cs.canariesIntact = s[kCanaryBad] == 0;
            cs.inputsUnchanged = s[kHashBefore] == s[kHashAfter];
            cs.seed = seed;
            cs.distribution = name;
            cs.passed = cs.passed && cs.canariesIntact && cs.inputsUnchanged;
            if (!cs.inputsUnchanged)
                addReason(
                    out.reasons, reason("dynamic.input-modified", "the candidate changed its inputs on " + where));
            if (!cs.canariesIntact)
                addReason(out.reasons,
                    reason("dynamic.canary",
                        "the candidate wrote outside its buffers on " + where + " (" + std::to_string(s[kCanaryBad])
                            + " guard words changed)"));
            for (const auto& [rule, detail] : j.failures)
                addReason(out.reasons, reason(rule, detail + " on " + where + " (" + name + " inputs)"));
            sr.checks.push_back(cs);
            return cs.passed;
        };
        bool all = !launchFailed && !graphFailed;
        for (int ci = 0; ci < checksRun; ++ci) {
            const bool ok = evaluateCheck(ci, checks[ci].name, checks[ci].seed);
            if (ci == 0)
                firstPassed = ok;
            else if ((ci == 1 || ci == 2) && !ok)
                laterFailed = true;
            all = all && ok;
        }
        if (firstPassed && laterFailed)
            addReason(out.reasons,
                reason("dynamic.state-between-launches",
                    "correct on the first run but wrong on a later run with new values or new "
                    "buffer addresses (run order A, B, A') on "
                        + where));
        if (launchFailed)
            addReason(out.reasons, reason("launch.failed", "the launch failed on " + where + ": " + launchError));
        if (graphFailed)
            addReason(out.reasons,
                reason(
                    "graph.capture-failed", "the launch plan could not be captured into a CUDA graph: " + graphError));
        else if (!launchFailed && o.graphCheck) {
            const bool ok = evaluateCheck(graphCheck, "graph:replay", seedA);
            if (!ok)
                addReason(out.reasons,
                    reason("graph.capture-failed",
                        "the launch plan replayed from a CUDA graph gives "
                        "wrong results on "
                            + where));
            all = all && ok;
        }
        sr.correct = all;
        if (!all)
            (sr.heldOut ? anyHeldOutFailed : anyVisibleFailed) = true;
        sr.verifyMs = (nowSeconds() - shapeStart) * 1e3;
        out.shapes.push_back(std::move(sr));
    }
    if (anyHeldOutFailed)
        addReason(out.reasons,
            reason("dynamic.held-out-shape",
                anyVisibleFailed ? "also fails on held-out shapes drawn from the validity range"
                                 : "correct on the visible shapes but wrong on a held-out shape drawn from the "
                                   "validity range (shape withheld): special-casing shapes does not pass"));

    const double cuptiStart = nowSeconds();
    double harnessGpuMs = 0, candidateGpuMs = 0, referenceGpuMs = 0;
    std::map<std::string, double> harnessByKernel;
    if (cupti) {
        KL_CU(cuStreamSynchronize(m_stream));
        KL_CU(cuStreamSynchronize(m_hstream));
        ledger.active = false;
        auto records = CuptiKernelLog::instance().stop();
        out.kernelRecords = records.size();
        for (const auto& r : records) {
            const double ms = static_cast<double>(r.endNs - r.startNs) * 1e-6;
            if (r.name.rfind("kl_h_", 0) == 0) {
                harnessGpuMs += ms;
                harnessByKernel[r.name.substr(5)] += ms;
            } else if (candidateSymbols.count(r.name))
                candidateGpuMs += ms;
            else
                referenceGpuMs += ms;
        }
        out.cuptiChecked = true;
        // Compare as multisets of (symbol, grid, block): every kernel that ran must be one the harness launched.
        auto keyOf = [](const std::string& s, const int g[3], const int b[3]) {
            std::ostringstream k;
            k << s << "|" << g[0] << "," << g[1] << "," << g[2] << "|" << b[0] << "," << b[1] << "," << b[2];
            return k.str();
        };
        // The harness's own helpers (kl_h_*) are not part of any plan; candidates may not use that prefix.
        auto harnessKernel = [](const std::string& s) { return s.rfind("kl_h_", 0) == 0; };
        std::multiset<std::string> expected, actual;
        for (const auto& e : ledger.launched)
            if (!harnessKernel(e.symbol))
                expected.insert(keyOf(e.symbol, e.grid, e.block));
        bool deviceLaunched = false;
        for (const auto& r : records) {
            if (harnessKernel(r.name))
                continue;
            actual.insert(keyOf(r.name, r.grid, r.block));
            deviceLaunched = deviceLaunched || r.deviceLaunched;
        }
        if (expected != actual || deviceLaunched) {
            std::vector<std::string> extra, missing;
            std::set_difference(
                actual.begin(), actual.end(), expected.begin(), expected.end(), std::back_inserter(extra));
            std::set_difference(
                expected.begin(), expected.end(), actual.begin(), actual.end(), std::back_inserter(missing));
            std::string msg = "kernels that ran differ from the launch plan: " + std::to_string(extra.size())
                + " unexpected, " + std::to_string(missing.size()) + " missing";
            if (!extra.empty())
                msg += "; e.g. ran " + extra.front();
            if (!missing.empty())
                msg += "; e.g. planned " + missing.front();
            if (CuptiKernelLog::instance().dropped() == 0)
                addReason(out.reasons, reason("dynamic.kernel-mismatch", msg));
            else
                addReason(out.reasons, reason("harness.cupti-dropped", msg + " (CUPTI dropped records)", false));
        }
        ledger.launched.clear();
    }
    // Where a verification's time goes on the GPU (CUPTI's kernel durations): the harness's own kernels, the
    // reference (and anything else) and the candidate.
    std::fprintf(stderr,
        "[worker] verify %zu shapes: %.1f ms (CUPTI stop %.1f ms; GPU kernels: harness %.1f ms, reference "
        "%.1f ms, candidate %.1f ms;",
        o.shapes.size(), (nowSeconds() - verifyStart) * 1e3, (nowSeconds() - cuptiStart) * 1e3, harnessGpuMs,
        referenceGpuMs, candidateGpuMs);
    for (const auto& [name, ms] : harnessByKernel)
        std::fprintf(stderr, " %s %.1f", name.c_str(), ms);
    std::fprintf(stderr, ")\n");
    return out;
}

} // namespace kl::worker
