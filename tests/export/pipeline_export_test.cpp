// The pipeline bundle (kernels/export/pipeline_export.h): llama_mlp_decode with a candidate for some stages and the
// fallback for the rest, its layout, wiring and manifest; dsa_decode all on fallbacks; the errors of bad stage input.
#include "core/catalogue.h"
#include "core/errors.h"
#include "export_fixture.h"
#include "kernels/export/pipeline_export.h"
#include "tests/support/text_file.h"

#ifdef KLOOP_PATH
#include "tests/support/kloop_process.h"
#endif

#include <gtest/gtest.h>

namespace kl {
namespace {

    namespace fs = std::filesystem;
    using namespace kl::exporter;
    using namespace kl::test;

    // A session of a catalogue problem whose candidate is the problem's template, with realistic results.
    BuiltSession catalogueSession(const std::string& problem, Verdict verdict = Verdict::Accepted)
    {
        const fs::path folder = fs::path(KL_SOURCE_DIR) / "kernels/problems" / problem;
        const Problem p = loadProblem(folder.string());
        return buildSessionFrom(folder, folder / p.templateFile, syntheticOutcomes(p), verdict);
    }

    struct MlpSessions {
        BuiltSession norm = catalogueSession("rmsnorm");
        BuiltSession act = catalogueSession("silu_and_mul");
        ~MlpSessions()
        {
            fs::remove_all(norm.dir);
            fs::remove_all(act.dir);
        }
    };

    PipelineStageSource stageFrom(const std::string& stage, const BuiltSession& b, const std::string& candidate = "")
    {
        return parseStageSource(stage + "=" + b.dir.string() + (candidate.empty() ? "" : ":" + candidate));
    }

    Pipeline mlp()
    {
        return loadPipeline(findPipelineFolder("llama_mlp_decode"));
    }

    std::size_t at(const std::string& text, const std::string& what)
    {
        const auto i = text.find(what);
        EXPECT_NE(i, std::string::npos) << what;
        return i;
    }

    TEST(PipelineExport, StageSourceParsesSessionAndCandidate)
    {
        const auto a = parseStageSource("norm=runs/rms:c0007");
        EXPECT_EQ(a.stage, "norm");
        EXPECT_EQ(a.session, fs::path("runs/rms"));
        EXPECT_EQ(a.candidate, "c0007");
        const auto b = parseStageSource("act=/tmp/a:b/silu");
        EXPECT_EQ(b.session, fs::path("/tmp/a:b/silu"));
        EXPECT_EQ(b.candidate, "");
        for (const char* bad : { "norm", "=runs/rms", "norm=" })
            try {
                parseStageSource(bad);
                ADD_FAILURE() << bad;
            } catch (const InputError& e) {
                EXPECT_NE(std::string(e.what()).find("--stage"), std::string::npos) << e.what();
                EXPECT_NE(std::string(e.what()).find("STAGE=SESSION[:CANDIDATE]"), std::string::npos);
            }
    }

    TEST(PipelineExport, LlamaMlpBundleComposesEachStageAsTheSingleProblemExportAndNamesItsSource)
    {
        MlpSessions s;
        const Pipeline p = mlp();
        const PipelineExportPlan plan
            = planPipelineExport(p, { stageFrom("norm", s.norm), stageFrom("act", s.act, s.act.candidateId) });
        ASSERT_EQ(plan.stages.size(), 4u);
        EXPECT_TRUE(plan.refusals.empty());
        EXPECT_EQ(plan.stages[0].plan.candidateId, s.norm.candidateId); // the accepted one, as `kloop export` picks
        EXPECT_FALSE(plan.stages[1].hasCandidate());
        EXPECT_EQ(plan.stages[2].plan.candidateId, s.act.candidateId);
        EXPECT_FALSE(plan.stages[3].hasCandidate());
        EXPECT_EQ(plan.cudaArch, "90a");

        const fs::path out = freshDir("pipeline-out");
        ExportOptions o;
        o.outDir = out;
        const auto files = generatePipelineExport(p, plan, o);
        const std::string P = "kl_llama_mlp_decode";

        // A candidate stage is the single-problem bundle with the stage's prefix, byte for byte.
        ExportPlan normPlan = planExport(SessionStore::load(s.norm.dir), p.stages[0].problem, s.norm.candidateId);
        normPlan.prefix = P + "_norm";
        for (const auto& [path, content] :
            generateBundleFor(SessionStore::load(s.norm.dir), p.stages[0].problem, normPlan, false, o))
            EXPECT_EQ(files.at("norm/" + path), content) << path;
        for (const char* f : { "norm/src/kl_llama_mlp_decode_norm_candidate.cu", "norm/test/selftest.cu",
                 "norm/torch/kl_llama_mlp_decode_norm_op.cpp", "act/src/kl_llama_mlp_decode_act_candidate.cuh" })
            EXPECT_TRUE(files.count(f)) << f;
        // A fallback stage: the C API and dispatcher of a bundle, no candidate, cuBLAS behind it.
        EXPECT_FALSE(files.count("gate_up/src/kl_llama_mlp_decode_gate_up_candidate.cu"));
        EXPECT_FALSE(files.count("gate_up/test/selftest.cu"));
        EXPECT_NE(
            files.at("gate_up/src/kl_llama_mlp_decode_gate_up_fallback.cu").find("cublasGemmEx"), std::string::npos);
        EXPECT_NE(files.at("gate_up/src/kl_llama_mlp_decode_gate_up_dispatch.c").find("no candidate was exported"),
            std::string::npos);
        EXPECT_NE(files.at("gate_up/src/kl_llama_mlp_decode_gate_up_run.cu")
                      .find("kl_llama_mlp_decode_gate_up_run_candidate"),
            std::string::npos);

        // The entry point runs the stages in order on the wired tensors, intermediates in the caller's workspace.
        const std::string c = files.at("src/" + P + ".c");
        const auto norm = at(c, P + "_norm_run(&l->d0, kl_b_norm_y, x, w_norm, ");
        const auto gate = at(c, P + "_gate_up_run(&l->d1, kl_b_gate_up_C, kl_b_norm_y, w_gate_up, ");
        const auto act = at(c, P + "_act_run(&l->d2, kl_b_act_y, kl_b_gate_up_C, ");
        const auto down = at(c, P + "_down_run(&l->d3, out_, kl_b_act_y, w_down, ");
        EXPECT_LT(norm, gate);
        EXPECT_LT(gate, act);
        EXPECT_LT(act, down);
        EXPECT_NE(c.find(P + "_down_run_fallback(&l->d3, out_, kl_b_act_y, w_down, "), std::string::npos);
        EXPECT_NE(c.find("l->d1.N = v; /* 2 * I */"), std::string::npos);
        EXPECT_NE(c.find("(2.0 * 8192.0)"), std::string::npos); // the pipeline's constants baked
        const std::string h = files.at("include/" + P + ".h");
        EXPECT_NE(h.find("int " + P + "_run(const " + P
                      + "_dims* dims, const void* x, const void* w_norm, const void* w_gate_up, const void* w_down, "
                        "void* out_, void* workspace, size_t workspace_bytes, cudaStream_t stream);"),
            std::string::npos);
        const std::string cmake = files.at("CMakeLists.txt");
        for (const char* st : { "norm", "gate_up", "act", "down" })
            EXPECT_NE(cmake.find(std::string("add_subdirectory(") + st + ")"), std::string::npos) << st;
        EXPECT_LT(at(cmake, "set(CMAKE_CUDA_ARCHITECTURES 90a)"), at(cmake, "\nproject("));
        // Also a stage's own project (a standalone bundle): project() would otherwise set the compiler's default.
        const std::string stageCmake = files.at("norm/CMakeLists.txt");
        EXPECT_LT(at(stageCmake, "set(CMAKE_CUDA_ARCHITECTURES 90a)"), at(stageCmake, "\nproject("));
        const std::string torch = files.at("torch/" + P + "_op.cpp");
        EXPECT_NE(
            torch.find("m.def(\"run(Tensor x, Tensor w_norm, Tensor w_gate_up, Tensor w_down, int T) -> Tensor\")"),
            std::string::npos);
        const std::string selftest = files.at("test/pipeline_selftest.cu");
        EXPECT_NE(selftest.find(P + "_run_fallback("), std::string::npos);
        EXPECT_NE(selftest.find("cudaStreamBeginCapture"), std::string::npos);
        EXPECT_NE(selftest.find("\"T=64\""), std::string::npos); // a verify shape of the pipeline

        const Json m = Json::parse(files.at("manifest.json"));
        EXPECT_EQ(m.at("kind"), "pipeline");
        EXPECT_EQ(m.at("forced"), false);
        const Json& st = m.at("stages");
        ASSERT_EQ(st.size(), 4u);
        EXPECT_EQ(st[0].at("source"), "candidate");
        EXPECT_EQ(st[0].at("session").at("id"), "s-rmsnorm");
        EXPECT_EQ(st[0].at("session").at("directory"), s.norm.dir.filename().string());
        EXPECT_EQ(st[0].at("candidate").at("id"), s.norm.candidateId);
        EXPECT_DOUBLE_EQ(st[0].at("objective").at("value").get<double>(), 1.38);
        EXPECT_EQ(st[0].at("verification").at("verdict"), "accepted");
        EXPECT_EQ(st[0].at("verification").at("shapes_verified"), syntheticOutcomes(p.stages[0].problem).size());
        EXPECT_EQ(st[0].at("manifest"), "norm/manifest.json");
        EXPECT_EQ(st[2].at("origin"), "--stage act=" + s.act.dir.filename().string() + ":" + s.act.candidateId);
        EXPECT_EQ(st[1].at("source"), "fallback");
        EXPECT_EQ(st[1].at("fallback"), "cuBLAS (cublas_gemm_bf16)");
        EXPECT_EQ(st[1].at("pipeline_impl"), "library");
        EXPECT_EQ(m.at("intermediates")[1], Json({ { "name", "gate_up.C" }, { "dtype", "bf16" } }));
        EXPECT_EQ(m.at("intermediates").size(), 3u);
        EXPECT_EQ(m.at("constants"), Json({ { "H", 4096 }, { "I", 8192 } }));
        EXPECT_EQ(m.at("self_test_shapes")[2].at("label"), "T=64");
        EXPECT_EQ(m.at("self_test_shapes")[2].at("extents").at("w_gate_up"), Json::array({ 16384, 4096 }));
        EXPECT_DOUBLE_EQ(st[0].at("scalars").at("eps").get<double>(), 1e-6);
        EXPECT_EQ(
            m.at("end_to_end_tolerance").at("out").at("rel_l2"), p.stages[3].problem.toleranceFor(DType::BF16).relL2);
        for (const auto& [path, hash] : m.at("files").items())
            EXPECT_EQ(hash, sha256Hex(files.at(path))) << path;
        // Nothing of this machine's paths: the session directories are named, never given.
        for (const auto& [path, content] : files)
            EXPECT_EQ(content.find(s.norm.dir.parent_path().string()), std::string::npos) << path;

        const PipelineExportResult r
            = exportPipeline(p, { stageFrom("norm", s.norm), stageFrom("act", s.act, s.act.candidateId) }, o);
        EXPECT_TRUE(fs::exists(out / "manifest.json"));
        EXPECT_TRUE(fs::exists(out / "down/src/kl_llama_mlp_decode_down_fallback.cu"));
        EXPECT_EQ(r.files.size(), files.size());
        fs::remove_all(out);
    }

    TEST(PipelineExport, DsaDecodeOnFallbacksWiresTheSharedCacheAndIntegerIntermediates)
    {
        const Pipeline p = loadPipeline(findPipelineFolder("dsa_decode"));
        const PipelineExportPlan plan = planPipelineExport(p, {});
        for (const auto& e : plan.stages)
            EXPECT_FALSE(e.hasCandidate()) << e.stage;
        EXPECT_EQ(plan.warnings.size(), 1u); // no session: built for sm_90a, said so
        ExportOptions o;
        o.outDir = freshDir("dsa-out");
        const auto files = generatePipelineExport(p, plan, o);
        const std::string c = files.at("src/kl_dsa_decode.c");
        // block_table feeds the indexer and the attention; top-k's indices go from the workspace to the attention.
        EXPECT_NE(c.find("kl_dsa_decode_indexer_run_fallback(&l->d0, kl_b_indexer_scores, q_index, weights, "
                         "k_index_cache, block_table, seq_lens"),
            std::string::npos)
            << c;
        EXPECT_NE(c.find("kl_dsa_decode_topk_run_fallback(&l->d1, kl_b_topk_indices, kl_b_indexer_scores, seq_lens, "),
            std::string::npos);
        EXPECT_NE(c.find("kl_dsa_decode_attn_run_fallback(&l->d2, out_, q, kv_cache, block_table, kl_b_topk_indices, "),
            std::string::npos)
            << c;
        EXPECT_NE(c.find("B * MAXP * PS <= 2097152"), std::string::npos); // the pipeline's constraint, checked
        const std::string selftest = files.at("test/pipeline_selftest.cu");
        // At B=3, SQ=2, MAXP=5, evaluated at export: block_table a permutation of the pages, seq_lens lengths that
        // reach into the last page ([(MAXP - 1) * PS + 2, MAXP * PS]), one per row of B.
        EXPECT_NE(
            selftest.find("{{3LL, 2LL, 5LL}, \"B=3,MAXP=5,SQ=2\", {{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, "
                          "0}, {3, 0.0, 0.0, 0.0, 5.0}, {4, 258.0, 320.0, 0.0, 3.0}"),
            std::string::npos);
        const Json m = Json::parse(files.at("manifest.json"));
        for (const auto& st : m.at("stages"))
            EXPECT_EQ(st.at("source"), "fallback");
        EXPECT_EQ(m.at("intermediates")[0].at("name"), "indexer.scores");
        EXPECT_EQ(m.at("intermediates")[1], Json({ { "name", "topk.indices" }, { "dtype", "i32" } }));
    }

    // Each error names the flag or file; nothing is written and an existing bundle at DIR is left as it was.
    TEST(PipelineExport, BadStageInputIsAClearErrorAndLeavesTheOutputUntouched)
    {
        MlpSessions s;
        const BuiltSession rejected = catalogueSession("rmsnorm", Verdict::Rejected);
        const Pipeline p = mlp();
        const fs::path out = freshDir("pipeline-keep");
        fs::create_directories(out);
        writeFileAtomic(out / "manifest.json", "an earlier bundle\n");
        ExportOptions o;
        o.outDir = out;
        o.overwrite = true;
        auto fails = [&](const std::vector<PipelineStageSource>& stages, const std::vector<std::string>& want) {
            try {
                exportPipeline(p, stages, o);
                ADD_FAILURE() << "exported";
            } catch (const std::exception& e) {
                for (const auto& w : want)
                    EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what() << "\nwant: " << w;
            }
            EXPECT_EQ(readTextFile(out / "manifest.json"), "an earlier bundle\n");
            EXPECT_EQ(std::distance(fs::directory_iterator(out), fs::directory_iterator()), 1);
        };
        fails({ stageFrom("bogus", s.norm) }, { "--stage bogus=", "has no stage 'bogus'", "norm, gate_up, act, down" });
        fails({ stageFrom("norm", s.act) }, { "--stage norm=", "tunes problem silu_and_mul", "runs rmsnorm" });
        fails({ parseStageSource("norm=" + (s.norm.dir / "missing").string()) }, { "--stage norm=", "no session at" });
        fails({ stageFrom("norm", s.norm, "c0999") }, { "--stage norm=", "no candidate 'c0999'" });
        fails({ stageFrom("norm", s.norm), stageFrom("norm", s.norm) }, { "stage norm is given twice" });
        // Not accepted: refused without --force, naming the stage and its flag.
        try {
            exportPipeline(p, { stageFrom("norm", rejected, rejected.candidateId) }, o);
            ADD_FAILURE() << "exported";
        } catch (const ExportRefused& e) {
            EXPECT_NE(std::string(e.what()).find("stage norm (--stage norm="), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("verdict"), std::string::npos) << e.what();
        }
        EXPECT_EQ(readTextFile(out / "manifest.json"), "an earlier bundle\n");
        // A candidate of a session that pipeline.json names, relative to the pipeline's folder.
        Pipeline named = p;
        named.stages[2].impl.kind = StageImpl::Kind::Candidate;
        named.stages[2].impl.session = "missing-session";
        named.stages[2].impl.candidate = "c0002";
        try {
            planPipelineExport(named, {});
            ADD_FAILURE() << "planned";
        } catch (const InputError& e) {
            EXPECT_NE(
                std::string(e.what()).find("pipeline.json stages[2] (act).impl: no session at"), std::string::npos)
                << e.what();
        }
        // --force exports it, the refusal written into the manifest.
        o.force = true;
        const auto r = exportPipeline(p, { stageFrom("norm", rejected, rejected.candidateId) }, o);
        EXPECT_TRUE(r.forced);
        const Json m = Json::parse(readTextFile(out / "manifest.json"));
        EXPECT_EQ(m.at("forced"), true);
        EXPECT_FALSE(m.at("stages")[0].at("refusals").empty());
        fs::remove_all(out);
        fs::remove_all(rejected.dir);
    }

#ifdef KLOOP_PATH
    TEST(PipelineExport, KloopPipelineExportTakesRepeatedStagesAndNamesTheBadFlag)
    {
        MlpSessions s;
        const fs::path scratch = freshDir("pipeline-cli");
        fs::create_directories(scratch);
        const fs::path out = scratch / "bundle";
        auto r = kl::clitest::runKloop(
            { "pipeline", "export", "llama_mlp_decode", "--stage", "norm=" + s.norm.dir.string(), "--stage",
                "act=" + s.act.dir.string(), "--out", out.string(), "--json" },
            {}, scratch);
        ASSERT_EQ(r.exitCode, 0) << r.err;
        const Json j = Json::parse(r.out);
        EXPECT_EQ(j.at("stages")[0].at("candidate"), s.norm.candidateId);
        EXPECT_EQ(j.at("stages")[2].at("candidate"), s.act.candidateId);
        EXPECT_TRUE(j.at("stages")[1].at("candidate").is_null());
        EXPECT_TRUE(fs::exists(out / "include/kl_llama_mlp_decode.h"));
        r = kl::clitest::runKloop({ "pipeline", "export", "llama_mlp_decode", "--stage", "act=" + s.norm.dir.string(),
                                      "--out", (scratch / "other").string() },
            {}, scratch);
        EXPECT_EQ(r.exitCode, 1);
        EXPECT_NE(r.err.find("kloop pipeline export: --stage act="), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(scratch / "other"));
        r = kl::clitest::runKloop({ "pipeline", "export", "llama_mlp_decode" }, {}, scratch);
        EXPECT_EQ(r.exitCode, 2);
        fs::remove_all(scratch);
    }
#endif

} // namespace
} // namespace kl
