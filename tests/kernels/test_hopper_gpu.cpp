// Hopper candidates on an sm_90 GPU: gemm_bf16's TMA/wgmma template passes the harness (every check, graph
// capture, held-out shapes) at its defaults and with split-K + programmatic dependent launch, and its skinny path
// (a cluster per column tile summing its splits through distributed shared memory) across its space, while one that
// leaves a split out of the sum is caught; a tensor map the encoder would refuse at the chosen parameters is a launch
// verdict before anything runs; a TMA candidate that reads past its tile is caught by the checks. decode_attention's
// tensor-core templates pass across their spaces (sm_80: one split and many, splits with no tokens; sm_90: one CTA
// and many, ranges crossing sequences) and versions that drop a sequence's last token (sm_90: or its last page, a
// piece's last token, a piece in the merge) are caught. So do mla_decode's shared-KV candidate and
// sparse_mla_decode's tensor-core template, against one dropping the last token or page (dense) or the last listed
// row (sparse), and so do their wgmma successors (mla_hypothesis/shared_kv_wgmma.cu,
// sparse_mla_decode's sm_90a template). The CuTe gemm_bf16 candidate of the sweep-rate bench
// (bench/hopper/cute_gemm.cu) passes at two points. dsa_indexer's wgmma template passes at four points of its
// space and versions dropping a row's last token, every page's last token or a sequence's last page are caught.
// rmsnorm's cluster-split template (not yet a seed) passes with one block per row slice and with eight, and one that
// leaves a block's partial sum out is caught; softmax's bulk-copy ring (its template at RING=1) passes with rows kept
// in the ring and streamed twice, alone and split over clusters, and ones that leave a row's last vector or a peer's
// partial out of the sum are caught.
#include "core/device.h"
#include "core/json_io.h"
#include "core/session_store.h"
#include "kernels/gpu_evaluator.h"
#include "tests/support/gpu_available.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <gtest/gtest.h>
#include <set>

namespace {

kl::GpuEvaluatorOptions options()
{
    kl::GpuEvaluatorOptions o;
    o.compileCacheDir = std::filesystem::temp_directory_path() / "kl-gpu-test-cache";
    o.verifyTimeoutSeconds = 60;
    if (const char* w = std::getenv("KL_WORKER"))
        o.worker.command = { w };
    return o;
}

kl::EvaluateOptions quick()
{
    kl::EvaluateOptions e;
    e.maxSecondsPerShape = 0.2;
    e.heldOutCount = 3;
    e.seed = 4242;
    return e;
}

std::string reasonsText(const kl::Evaluation& e)
{
    std::string s = std::string("verdict ") + kl::verdictName(e.verdict) + ":";
    for (const auto& r : e.reasons)
        s += "\n  " + r.rule + ": " + r.message;
    if (!e.compile.ok)
        s += "\n" + e.compile.log;
    return s;
}

kl::Candidate candidate(const std::string& src, const kl::ParamValues& params, const std::string& id)
{
    kl::Candidate c;
    c.id = id;
    c.source = src;
    c.params = params;
    return c;
}

std::string replaced(std::string s, const std::string& from, const std::string& to)
{
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
        s.replace(at, from.size(), to);
    return s;
}

// A problem's template as the loop seeds it on this device, skipped below the architecture it needs.
class TemplateOnGpu : public ::testing::Test {
protected:
    // sourceFile (under the source tree) instead of the template, where given.
    void load(const std::string& problem, int minArch, const std::string& sourceFile = "")
    {
        if (!kl::test::cudaDeviceAvailable())
            GTEST_SKIP() << "no CUDA device";
        ev = std::make_unique<kl::GpuEvaluator>(
            kl::loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/" + problem), options());
        const int arch = kl::archNumber(ev->device());
        if (arch < minArch)
            GTEST_SKIP() << "needs sm_" << minArch << ", the device is " << ev->device().arch;
        source = sourceFile.empty()
            ? kl::readFile(std::filesystem::path(ev->problem().folder) / ev->problem().templateFor(arch))
            : kl::readFile(std::filesystem::path(KL_SOURCE_DIR) / sourceFile);
    }
    // The template at p is correct at every shape (held-out ones included); prints each shape's timing. A point may
    // go to review only for the rules in reviewFor (the physics of its timings, never its results).
    void expectCorrect(const kl::ParamValues& p, const std::set<std::string>& reviewFor = {}) const
    {
        std::string params;
        for (const auto& [k, v] : p)
            params += " " + k + "=" + std::to_string(v);
        const auto e = ev->evaluate(candidate(source, p, "template"), quick(), kl::CancelToken {});
        const bool reviewedForAllowedRules = e.verdict == kl::Verdict::PendingReview && !e.reasons.empty()
            && std::all_of(e.reasons.begin(), e.reasons.end(),
                [&](const kl::VerdictReason& r) { return reviewFor.count(r.rule) > 0; });
        EXPECT_TRUE(e.verdict == kl::Verdict::Correct || reviewedForAllowedRules) << params << "\n" << reasonsText(e);
        for (const auto& s : e.shapes) {
            EXPECT_TRUE(s.correct) << s.shape.label() << params;
            if (s.timing)
                std::printf("[ %s ] %s%s %s: %.2f us, baseline %.2f us, %.3fx\n", ev->problem().name.c_str(),
                    s.shape.label().c_str(), params.c_str(), s.heldOut ? "held-out" : "", s.timing->medianUs,
                    s.baselineTiming ? s.baselineTiming->medianUs : 0.0, s.speedup);
        }
    }
    // Each mutant (the source with one string replaced, at params) is not judged correct and fails some shape.
    template <std::size_t N>
    void expectEachMutantCaught(
        const std::pair<const char*, const char*> (&mutations)[N], const kl::ParamValues& params = {}) const
    {
        for (const auto& [from, to] : mutations) {
            const std::string src = replaced(source, from, to);
            const auto e = ev->evaluate(candidate(src, params, "short"), quick(), kl::CancelToken {});
            EXPECT_NE(e.verdict, kl::Verdict::Correct) << to << "\n" << reasonsText(e);
            EXPECT_FALSE(e.correctEverywhere()) << to;
        }
    }
    std::unique_ptr<kl::GpuEvaluator> ev;
    std::string source;
};

class HopperGpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("gemm_bf16", 90); }
};

// The sweep-rate bench's CuTe candidate for gemm_bf16 (mma.sync + cp.async: sm_80+).
class CuteGemmGpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("gemm_bf16", 80, "bench/hopper/cute_gemm.cu"); }
};

// decode_attention's sm_80 tensor-core template (the seed on sm_80 .. sm_89).
class DecodeAttentionGpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("decode_attention", 80, "kernels/problems/decode_attention/template_sm80.cu"); }
};

// decode_attention's sm_90 template (bulk copies into an mbarrier ring, one CTA per SM, a PDL-launched merge).
class DecodeAttentionSm90Gpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("decode_attention", 90, "kernels/problems/decode_attention/template_sm90.cu"); }
};

// mla_decode's shared-KV candidate (the engineer's hypothesis; its defaults take 222 KB of shared memory: sm_90).
class MlaDecodeGpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("mla_decode", 90, "bench/attention/mla_hypothesis/shared_kv.cu"); }
};

// sparse_mla_decode's template on this device (sm_90a: the wgmma one).
class SparseMlaDecodeGpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("sparse_mla_decode", 90); }
};

// sparse_mla_decode's mma.sync template (Blackwell's; 226 KB of shared memory at its defaults), here on sm_90.
class SparseMlaDecodeMmaSyncGpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("sparse_mla_decode", 90, "kernels/problems/sparse_mla_decode/template_mma_sync.cu"); }
};

// mla_decode's wgmma candidate (TMA pages; sm_90a only).
class MlaDecodeWgmmaGpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("mla_decode", 90, "bench/attention/mla_hypothesis/shared_kv_wgmma.cu"); }
};

// dsa_indexer's template on this device (sm_90a: TMA pages into an mbarrier ring, wgmma).
class DsaIndexerSm90Gpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("dsa_indexer", 90); }
};

// rmsnorm's cluster-split template (kernels/problems/rmsnorm/template_sm90.cu), not yet in its arch_templates.
class RmsnormSm90Gpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("rmsnorm", 90, "kernels/problems/rmsnorm/template_sm90.cu"); }
};

// rmsnorm's portable template (sm_75+), here for the fixture.
class RmsnormTemplateGpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("rmsnorm", 75); }
};

// softmax's bulk-copy-fed ring: its template at RING=1.
class SoftmaxRingGpu : public TemplateOnGpu {
protected:
    void SetUp() override { load("softmax", 90); }
    // A mutant is caught by its outputs, not refused before it runs (parameters its constraints reject would be).
    static void expectRanAndFailedSomewhere(const kl::Evaluation& e)
    {
        EXPECT_TRUE(e.compile.ok) << e.compile.log;
        EXPECT_TRUE(std::any_of(e.shapes.begin(), e.shapes.end(), [](const auto& s) { return !s.correct; }))
            << reasonsText(e);
    }
};

} // namespace

// The defaults; split-K summed by a second kernel and in the GEMM (the last split of a tile); B multicast in clusters
// of two, alone and with split-K.
TEST_F(HopperGpu, TmaWgmmaTemplatePassesWithSplitKClustersAndInKernelReduction)
{
    expectCorrect({});
    // A fixed split (FIT = 0) over every unit, unless a point sets its own.
    const kl::ParamValues fixedSplit { { "FIT", 0 }, { "REDUCE", 0 }, { "SPLITK", 1 }, { "SKINNY_M", 32 } };
    for (kl::ParamValues p : { kl::ParamValues { { "BM", 64 }, { "BN", 128 }, { "STAGES", 6 }, { "SPLITK", 4 } },
             kl::ParamValues { { "BM", 128 }, { "BN", 128 }, { "STAGES", 5 }, { "SPLITK", 2 }, { "REDUCE", 1 } },
             kl::ParamValues { { "CM", 2 } },
             kl::ParamValues {
                 { "BM", 64 }, { "BN", 128 }, { "STAGES", 6 }, { "SPLITK", 4 }, { "REDUCE", 1 }, { "CM", 2 } } }) {
        p.insert(fixedSplit.begin(), fixedSplit.end()); // insert keeps the point's own values
        expectCorrect(p);
    }
}

// FIT = 1 above SKINNY_M = 32 (the verify shapes M = 33 .. 1000, the M = 128 tuning shapes, held-out ones): the
// narrow kernel and the wide one, each with and without a split of K, the split summed by the second kernel, in the
// GEMM and over a cluster's distributed shared memory (up to 8 blocks: FIT = 2 keeps the 256-wide tiles), and B
// multicast over clusters of two.
TEST_F(HopperGpu, FittedPathPassesWithBothTilesAndSplits)
{
    const kl::ParamValues fit { { "FIT", 1 }, { "SKINNY_M", 32 } };
    auto with = [&](kl::ParamValues p) {
        p.insert(fit.begin(), fit.end());
        return p;
    };
    for (const kl::ParamValues& p : { with({ { "BN", 128 }, { "STAGES", 6 }, { "SPLITK", 2 } }),
             with({ { "BN", 256 }, { "STAGES", 4 }, { "SPLITK", 4 }, { "REDUCE", 1 } }),
             with({ { "BM", 64 }, { "BN", 128 }, { "STAGES", 6 }, { "SPLITK", 2 }, { "CM", 2 }, { "REDUCE", 0 } }),
             with({ { "BN", 128 }, { "STAGES", 6 }, { "SPLITK", 4 }, { "REDUCE", 2 } }),
             with({ { "FIT", 2 }, { "BN", 128 }, { "STAGES", 6 }, { "SPLITK", 4 }, { "REDUCE", 2 } }),
             with({ { "FIT", 2 }, { "BN", 256 }, { "STAGES", 4 }, { "SPLITK", 8 }, { "REDUCE", 2 } }) })
        expectCorrect(p);
}

// The skinny path (M <= 128: the decode tuning shapes, the verify shapes M = 1, 33, 128 and held-out decode shapes)
// at its defaults and at points that change the column tile and the splits: 64-row tiles with at most 2 splits (two
// blocks share an SM at N = 14336), 256-row tiles with up to 8, splits of at most 4, none.
TEST_F(HopperGpu, SkinnyPathPassesAcrossItsSpace)
{
    for (const kl::ParamValues& p : { kl::ParamValues {}, kl::ParamValues { { "SBN", 64 }, { "SKMAX", 2 } },
             kl::ParamValues { { "SBN", 256 }, { "SKMAX", 8 } }, kl::ParamValues { { "SKMAX", 4 } },
             kl::ParamValues { { "SKMAX", 1 } } })
        expectCorrect(p);
}

// A cluster that leaves a split's partial tile out of its sum (every shape with 2 or more splits) is caught.
TEST_F(HopperGpu, LeavingASplitOutOfTheClusterSumIsCaught)
{
    const std::string src = replaced(source, "for (int r = 1; r < splits; ++r)", "for (int r = 2; r < splits; ++r)");
    const auto e = ev->evaluate(candidate(src, {}, "dropped-split"), quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected) << reasonsText(e);
    EXPECT_FALSE(e.correctEverywhere());
}

// REDUCE=2: a fitted tile whose blocks each leave the next partner's partials out of their slice's sum (M = 128,
// N = 4096: two splits).
TEST_F(HopperGpu, LeavingAPartnerOutOfTheFittedClusterSumIsCaught)
{
    const std::string src = replaced(source, "if (partner != static_cast<int>(splitRank))",
        "if (partner != static_cast<int>(splitRank) && partner != (static_cast<int>(splitRank) + 1) % splits)");
    const auto e = ev->evaluate(candidate(src, {}, "dropped-partner"), quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected) << reasonsText(e);
    EXPECT_FALSE(e.correctEverywhere());
}

TEST_F(HopperGpu, MapTheEncoderWouldRefuseIsAVerdictBeforeLaunch)
{
    // The default BMAP = BM = 128 is valid (parsing accepts it); BMAP = 512 exceeds the box limit of 256 at every
    // shape, which only binding the plan for the device finds.
    std::string src
        = replaced(source, "// @kl:param BM = 128", "// @kl:param BMAP = 128 in [128, 512]\n// @kl:param BM = 128");
    src = replaced(src, "tensor=A box=(64, BM)", "tensor=A box=(64, BMAP)");
    const auto e = ev->evaluate(candidate(src, { { "BMAP", 512 } }, "badmap"), quick(), kl::CancelToken {});
    EXPECT_NE(e.verdict, kl::Verdict::Correct);
    EXPECT_NE(e.verdict, kl::Verdict::Crashed) << reasonsText(e);
    const std::string text = reasonsText(e);
    EXPECT_NE(text.find("launch.invalid-config"), std::string::npos) << text;
    EXPECT_NE(text.find("@kl:tensormap tmA box[1]: 'BMAP' is 512"), std::string::npos) << text;
    // The same map at its valid default still works.
    EXPECT_EQ(ev->evaluate(candidate(src, {}, "goodmap"), quick(), kl::CancelToken {}).verdict, kl::Verdict::Correct);
}

TEST_F(HopperGpu, TmaReadPastItsTileIsCaught)
{
    // One row further down: inside the tensor it reads the next tile's rows, past M the copy engine's zero fill.
    const std::string src
        = replaced(source, "kb * BK, u.mt * BM, &full[stage]", "kb * BK, u.mt * BM + 1, &full[stage]");
    const auto e = ev->evaluate(candidate(src, {}, "shifted"), quick(), kl::CancelToken {});
    EXPECT_EQ(e.verdict, kl::Verdict::Rejected) << reasonsText(e);
    EXPECT_FALSE(e.correctEverywhere());
}

// Rows past M and columns past N zero-filled on load and masked on store (verify shapes M = 1, 33, 1000; N = 320
// against BN = 128 and 256), at the defaults and at a deeper, BK = 64 ring of smaller tiles.
TEST_F(CuteGemmGpu, CuteCandidatePassesAtItsDefaultsAndAtADeeperRing)
{
    for (const kl::ParamValues& p : { kl::ParamValues {},
             kl::ParamValues { { "BM", 64 }, { "BN", 256 }, { "BK", 64 }, { "STAGES", 4 }, { "WM", 1 }, { "WN", 4 } } })
        expectCorrect(p);
}

TEST_F(DecodeAttentionGpu, TensorCoreTemplatePassesAcrossItsSpace)
{
    for (const kl::ParamValues& p :
        { kl::ParamValues {}, kl::ParamValues { { "TILE", 32 }, { "WARPS", 1 }, { "STAGES", 6 }, { "WAVES", 8 } },
            kl::ParamValues { { "TILE", 128 }, { "WARPS", 4 }, { "STAGES", 2 }, { "WAVES", 1 } },
            kl::ParamValues { { "TILE", 64 }, { "WARPS", 2 }, { "STAGES", 4 }, { "WAVES", 3 } } })
        expectCorrect(p);
}

TEST_F(DecodeAttentionGpu, DroppingTheLastTokenIsCaught)
{
    const std::string src = replaced(source, "const int len = seq_lens[b];", "const int len = seq_lens[b] - 1;");
    const auto e = ev->evaluate(candidate(src, {}, "short"), quick(), kl::CancelToken {});
    EXPECT_NE(e.verdict, kl::Verdict::Correct) << reasonsText(e);
    EXPECT_FALSE(e.correctEverywhere());
}

// The defaults; the deepest ring of 8-token stages without the L2 hint and a CTA per 16 tokens (small batches split
// the most); the shallowest ring of 16-token stages with a CTA per 256 tokens (small batches in one CTA, no merge);
// a short ring of 8-token stages; 16-token stages that rescale O only when a row's maximum grows. Verify shapes: one
// CTA (B=1, one page), 256 sequences of at most 32 tokens over 132 CTAs (a CTA's range crosses many sequences), pages
// of 64.
TEST_F(DecodeAttentionSm90Gpu, StreamTemplatePassesAcrossItsSpace)
{
    for (const kl::ParamValues& p :
        { kl::ParamValues {}, kl::ParamValues { { "TT", 8 }, { "STAGES", 6 }, { "MINTOK", 16 }, { "EVICT", 0 } },
            kl::ParamValues { { "TT", 16 }, { "STAGES", 2 }, { "MINTOK", 256 } },
            kl::ParamValues { { "TT", 8 }, { "STAGES", 3 }, { "MINTOK", 128 } },
            kl::ParamValues { { "TT", 16 }, { "STAGES", 3 }, { "LAZY", 1 } }, kl::ParamValues { { "FUSE", 1 } },
            kl::ParamValues { { "FUSE", 1 }, { "TT", 16 }, { "STAGES", 2 }, { "MINTOK", 256 } } })
        expectCorrect(p);
}

// Each sequence's last token or last page left out of the lengths, each CTA's piece one token short in the softmax,
// and the merge leaving out the last CTA's piece of a split sequence; without the merge kernel (FUSE), the combining
// CTA leaving out the last piece (gathered from the slots, or copied into its ring), never combining, or combining one
// arrival early (a race with the last piece's stores, so only likely to be caught).
TEST_F(DecodeAttentionSm90Gpu, DroppingATokenAPageOrAPieceIsCaught)
{
    const std::pair<const char*, const char*> mutations[]
        = { { "? seq_lens[base + tid] : 0;", "? max(seq_lens[base + tid] - 1, 1) : 0;" },
              { "? seq_lens[base + tid] : 0;", "? max(seq_lens[base + tid] - PS, 1) : 0;" },
              { "valid = min(TT, w.end - w.t);", "valid = min(TT, w.end - w.t - 1);" },
              { "if (cta <= c1 && ", "if (cta < c1 && " } };
    expectEachMutantCaught(mutations);
    const std::pair<const char*, const char*> fused[] = { { "if (cta <= c1 && ", "if (cta < c1 && " },
        { "        for (int k = 0; k < n; ++k)\n            if (holdsTokens(",
            "        for (int k = 0; k < n - 1; ++k)\n            if (holdsTokens(" },
        { "== static_cast<unsigned>(pieces - 1);", "== static_cast<unsigned>(pieces);" },
        { "== static_cast<unsigned>(pieces - 1);", "== static_cast<unsigned>(pieces - 2);" } };
    expectEachMutantCaught(fused, { { "FUSE", 1 } });
}

// By sequence: whole (SEQ = 1) and in clusters of up to 2, 7 and 8 over distributed shared memory (B = 256 gets one
// CTA a sequence whatever SEQ is, B = 40 three on 132 SMs); the verify shapes of twelve and forty one-page sequences
// have one of a single token, so some CTAs' shares are empty. A cluster leaving out its last CTA's piece, a share one
// token short, and each sequence's last token left out are caught.
TEST_F(DecodeAttentionSm90Gpu, SequenceClustersPassAndDroppingAShareIsCaught)
{
    for (const kl::ParamValues& p : { kl::ParamValues { { "SEQ", 1 } }, kl::ParamValues { { "SEQ", 8 } },
             kl::ParamValues { { "SEQ", 2 }, { "TT", 16 }, { "STAGES", 2 }, { "EVICT", 0 } },
             kl::ParamValues { { "SEQ", 7 }, { "TT", 8 }, { "STAGES", 3 }, { "LAZY", 1 } } })
        expectCorrect(p);
    const std::pair<const char*, const char*> mutations[]
        = { { "if (ml[p].x != negInf())", "if (p < P - 1 && ml[p].x != negInf())" },
              { "g1 = shareStart(r + 1, P, total);", "g1 = max(g0, shareStart(r + 1, P, total) - 1);" },
              { "prefix[1] = seq_lens[b];", "prefix[1] = max(seq_lens[b] - 1, 1);" } };
    expectEachMutantCaught(mutations, { { "SEQ", 8 } });
}

TEST_F(MlaDecodeGpu, SharedKvCandidatePassesAcrossItsSpace)
{
    for (const kl::ParamValues& p :
        { kl::ParamValues {}, kl::ParamValues { { "BN", 32 }, { "STAGES", 4 }, { "WAVES", 2 } },
            kl::ParamValues { { "BN", 64 }, { "STAGES", 2 }, { "WAVES", 4 } } })
        expectCorrect(p);
}

TEST_F(MlaDecodeGpu, DroppingTheLastTokenOrPageIsCaught)
{
    for (const char* shorter : { "seq_lens[b] - 1;", "seq_lens[b] - kPS;" }) {
        const std::string src = replaced(source, "seq_lens[b];", shorter);
        const auto e = ev->evaluate(candidate(src, {}, "short"), quick(), kl::CancelToken {});
        EXPECT_NE(e.verdict, kl::Verdict::Correct) << shorter << "\n" << reasonsText(e);
        EXPECT_FALSE(e.correctEverywhere()) << shorter;
    }
}

TEST_F(SparseMlaDecodeMmaSyncGpu, TensorCoreTemplatePassesAcrossItsSpace)
{
    for (const kl::ParamValues& p :
        { kl::ParamValues {}, kl::ParamValues { { "BN", 64 }, { "STAGES", 2 }, { "WAVES", 3 } },
            kl::ParamValues { { "BN", 32 }, { "STAGES", 4 }, { "WAVES", 2 } } })
        expectCorrect(p);
}

TEST_F(SparseMlaDecodeMmaSyncGpu, DroppingTheLastListedRowIsCaught)
{
    const std::string src = replaced(source, "const int tEnd = min(listed,", "const int tEnd = min(listed - 1,");
    const auto e = ev->evaluate(candidate(src, {}, "short"), quick(), kl::CancelToken {});
    EXPECT_NE(e.verdict, kl::Verdict::Correct) << reasonsText(e);
    EXPECT_FALSE(e.correctEverywhere());
}

// One split per row block where the batch fills the machine, several (and empty ones) where it does not.
TEST_F(MlaDecodeWgmmaGpu, WgmmaCandidatePassesAcrossItsSpace)
{
    for (const kl::ParamValues& p : { kl::ParamValues {}, kl::ParamValues { { "WAVES", 4 } } })
        expectCorrect(p);
}

TEST_F(MlaDecodeWgmmaGpu, DroppingTheLastTokenOrPageIsCaught)
{
    for (const char* shorter : { "seq_lens[b] - 1;", "seq_lens[b] - kPS;" }) {
        const std::string src = replaced(source, "seq_lens[b];", shorter);
        const auto e = ev->evaluate(candidate(src, {}, "short"), quick(), kl::CancelToken {});
        EXPECT_NE(e.verdict, kl::Verdict::Correct) << shorter << "\n" << reasonsText(e);
        EXPECT_FALSE(e.correctEverywhere()) << shorter;
    }
}

TEST_F(SparseMlaDecodeGpu, WgmmaTemplatePassesAcrossItsSpace)
{
    EXPECT_EQ(ev->problem().templateFor(kl::archNumber(ev->device())), "template_sm90.cu");
    for (const kl::ParamValues& p : { kl::ParamValues {}, kl::ParamValues { { "WAVES", 3 } },
             kl::ParamValues { { "L2FETCH", 128 } }, kl::ParamValues { { "L2FETCH", 0 }, { "WAVES", 2 } } })
        expectCorrect(p);
}

TEST_F(SparseMlaDecodeGpu, DroppingTheLastListedRowIsCaught)
{
    const std::string src = replaced(source, "w.tEnd = min(listed,", "w.tEnd = min(listed - 1,");
    const auto e = ev->evaluate(candidate(src, {}, "short"), quick(), kl::CancelToken {});
    EXPECT_NE(e.verdict, kl::Verdict::Correct) << reasonsText(e);
    EXPECT_FALSE(e.correctEverywhere());
}

// The defaults (two consumers, 8 pages in flight), one consumer on a ring of 2 without the L2 hint, three on a ring
// of 9, two on a ring of 4. The verify shapes give one CTA one page (B=1, MAXP=1), a CTA per page across sequences
// (B=3, MAXP=3 and B=2, MAXP=33, SQ=2) and ranges of 31 pages crossing a sequence (B=2, MAXP=2048).
TEST_F(DsaIndexerSm90Gpu, WgmmaStreamTemplatePassesAcrossItsSpace)
{
    EXPECT_EQ(ev->problem().templateFor(kl::archNumber(ev->device())), "template_sm90.cu");
    for (const kl::ParamValues& p :
        { kl::ParamValues {}, kl::ParamValues { { "CONSUMERS", 1 }, { "STAGES", 2 }, { "EVICT", 0 } },
            kl::ParamValues { { "CONSUMERS", 3 }, { "STAGES", 9 } },
            kl::ParamValues { { "CONSUMERS", 2 }, { "STAGES", 4 } } })
        expectCorrect(p);
}

// A grid of at most 8 CTAs (in place of SM_COUNT): each CTA's range spans many sequences, so the producer refills each
// query slot while a consumer may still read the other, which no shape reaches on a GPU of 100 SMs or more (B <= 128).
TEST_F(DsaIndexerSm90Gpu, FewCtasReuseBothQuerySlots)
{
    const std::string src = replaced(source, "grid=(min(SM_COUNT, B * MAXP))", "grid=(min(8, B * MAXP))");
    for (const kl::ParamValues& p : { kl::ParamValues {}, kl::ParamValues { { "CONSUMERS", 1 }, { "STAGES", 2 } } }) {
        const auto e = ev->evaluate(candidate(src, p, "eight-ctas"), quick(), kl::CancelToken {});
        EXPECT_TRUE(e.correctEverywhere()) << reasonsText(e);
    }
}

// Each row's last visible token scored -inf, every page's last token scored -inf, each sequence's last page not
// fetched (its consumer multiplies whatever the stage held).
TEST_F(DsaIndexerSm90Gpu, DroppingATokenOrAPageIsCaught)
{
    const std::pair<const char*, const char*> mutations[]
        = { { "const int visible = seqLen - SQ_ + 1 + j;", "const int visible = seqLen - SQ_ + j;" },
              { "s < visible ? total", "s < visible && s % kPageTokens != kPageTokens - 1 ? total" },
              { "live = (g - b * MAXP) * kPageTokens <", "live = (g - b * MAXP + 1) * kPageTokens <" } };
    expectEachMutantCaught(mutations);
}

// SPLIT = 1 (the plain kernel), and 2, 4 and 8 blocks per row where the rows leave SMs idle: decode points that give
// T = 16, H = 8192 one row per block, a ragged last slice (H = 5128), a slice read in chunks; the prefill shapes run
// the plain kernel at every point; PRELOAD_W's weights, whole-row and chunked. The timings print against the baseline.
// On the H200 these decode points gain 4-7x at T = 16 (split over a cluster) and 1.5-2.5x at T = 256 (whose 256 row
// blocks fill the SMs unsplit, with threads sized for a slice): the referee's single-shape review of the decode regime,
// which this test allows; it asserts the results.
TEST_F(RmsnormSm90Gpu, ClusterSplitTemplatePassesAcrossItsSpace)
{
    for (const kl::ParamValues& p :
        { kl::ParamValues {}, kl::ParamValues { { "SPLIT", 8 }, { "THREADS", 128 }, { "CACHE", 1 }, { "MINTPR", 128 } },
            kl::ParamValues { { "SPLIT", 8 }, { "THREADS", 64 }, { "CACHE", 2 }, { "MINTPR", 64 } },
            kl::ParamValues { { "SPLIT", 4 }, { "THREADS", 64 }, { "CACHE", 1 }, { "MINTPR", 64 } },
            kl::ParamValues { { "SPLIT", 2 }, { "THREADS", 512 }, { "VEC", 2 }, { "CACHE", 16 } },
            kl::ParamValues { { "SPLIT", 4 }, { "PRELOAD_W", 1 } },
            kl::ParamValues { { "SPLIT", 2 }, { "THREADS", 64 }, { "VEC", 4 }, { "CACHE", 8 }, { "PRELOAD_W", 1 } } })
        expectCorrect(p, { "physics.single-shape-speedup" });
}

// BRANCHFREE's zeros past a row's end: rows that fill the threads' vectors (T = 16, H = 8192), ragged ones (H = 5128)
// and rows read in chunks (H = 16384 past 8192), with the weights preloaded or not.
TEST_F(RmsnormTemplateGpu, BranchFreeRowsPassAcrossItsSpace)
{
    for (const kl::ParamValues& p : { kl::ParamValues { { "BRANCHFREE", 1 } },
             kl::ParamValues {
                 { "THREADS", 256 }, { "CACHE", 4 }, { "MINTPR", 256 }, { "PRELOAD_W", 1 }, { "BRANCHFREE", 1 } },
             kl::ParamValues {
                 { "THREADS", 128 }, { "VEC", 4 }, { "CACHE", 4 }, { "PRELOAD_W", 1 }, { "BRANCHFREE", 1 } },
             kl::ParamValues { { "THREADS", 1024 }, { "VEC", 2 }, { "CACHE", 4 }, { "MINTPR", 128 }, { "MINB", 2 },
                 { "BRANCHFREE", 1 } } })
        expectCorrect(p, { "physics.single-shape-speedup" });
}

TEST_F(RmsnormSm90Gpu, LeavingOutABlocksPartialSumIsCaught)
{
    const std::string src = replaced(source, "for (int r = 0; r < S; ++r)", "for (int r = 1; r < S; ++r)");
    const auto e = ev->evaluate(candidate(src, { { "SPLIT", 8 } }, "partial"), quick(), kl::CancelToken {});
    EXPECT_NE(e.verdict, kl::Verdict::Correct) << reasonsText(e);
    EXPECT_FALSE(e.correctEverywhere());
}

// Rows kept in the ring and rows streamed twice (C = 131072 past 4 or 12 x 8192), split over clusters of 2, 4 and 8
// (slices kept, streamed twice, and clusters with more blocks than a short row has chunks), and a ring of exactly
// 48 KiB beside the static barriers (the harness opts it in). Persistent blocks walking many rows each (the ring's
// slots and parities over rows) unless PERSIST=0 is named: a block or a cluster per row, as at the defaults.
TEST_F(SoftmaxRingGpu, BulkCopyRingPassesAcrossItsSpace)
{
    const kl::ParamValues ring { { "RING", 1 }, { "PERSIST", 1 } };
    auto with = [&](kl::ParamValues p) {
        p.insert(ring.begin(), ring.end());
        return p;
    };
    for (const kl::ParamValues& p : { with({}), with({ { "THREADS", 512 }, { "STAGES", 12 }, { "BPS", 1 } }),
             with({ { "THREADS", 512 }, { "STAGES", 8 }, { "BPS", 1 }, { "CLUSTER", 2 } }),
             with({ { "CHUNK", 2048 }, { "BPS", 2 }, { "CLUSTER", 4 } }), with({ { "CHUNK", 4096 }, { "CLUSTER", 8 } }),
             with({ { "CHUNK", 2048 }, { "STAGES", 12 } }),
             with({ { "CHUNK", 2048 }, { "STAGES", 2 }, { "BPS", 1 }, { "CLUSTER", 2 } }), with({ { "PERSIST", 0 } }),
             with({ { "CLUSTER", 4 }, { "PERSIST", 0 } }),
             with({ { "CHUNK", 4096 }, { "CLUSTER", 8 }, { "PERSIST", 0 } }) })
        expectCorrect(p, { "physics.single-shape-speedup" });
}

// The first pass's count (the second pass still writes every vector): at C = 32, 8 of the 32 terms are missing.
TEST_F(SoftmaxRingGpu, LeavingARowsLastVectorOutOfTheSumIsCaught)
{
    const std::string src = replaced(source, "if (t + j * THREADS < nv)\n#pragma unroll\n                        for",
        "if (t + j * THREADS < nv - 1)\n#pragma unroll\n                        for");
    const auto e
        = ev->evaluate(candidate(src, { { "RING", 1 }, { "PERSIST", 1 } }, "short-sum"), quick(), kl::CancelToken {});
    EXPECT_NE(e.verdict, kl::Verdict::Correct) << reasonsText(e);
    expectRanAndFailedSomewhere(e);
}

// A cluster whose blocks leave the last peer's (max, sum) out of the row's is caught (every row of two chunks or more).
TEST_F(SoftmaxRingGpu, LeavingAPeersPartialOutOfTheRowIsCaught)
{
    const std::string src = replaced(source, "for (int r = 0; r < CLUSTER; ++r)\n                merge(",
        "for (int r = 0; r < CLUSTER - 1; ++r)\n                merge(");
    const kl::ParamValues p { { "RING", 1 }, { "CHUNK", 2048 }, { "CLUSTER", 2 }, { "PERSIST", 1 } };
    const auto e = ev->evaluate(candidate(src, p, "dropped-peer"), quick(), kl::CancelToken {});
    EXPECT_NE(e.verdict, kl::Verdict::Correct) << reasonsText(e);
    expectRanAndFailedSomewhere(e);
}
