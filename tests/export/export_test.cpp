#include "core/catalogue.h"
#include "core/errors.h"
#include "core/expr.h"
#include "export_fixture.h"
#include "kernels/export/bundle_gen.h"
#include "kernels/export/c_expr.h"
#include "kernels/export/dispatch_plan.h"
#include "kernels/export/exporter.h"
#include "kernels/export/flashinfer_bench.h"
#include "tests/support/text_file.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <thread>

extern char** environ;

namespace kl {
namespace {

    namespace fs = std::filesystem;
    using namespace kl::exporter;
    using namespace kl::test;

    int runCommand(const std::string& cmd, std::string* output = nullptr)
    {
        const fs::path log = kl::test::freshDir("cmd");
        const std::string full = cmd + " > " + log.string() + " 2>&1";
        const int rc = std::system(full.c_str());
        if (output)
            *output = kl::test::readTextFile(log);
        fs::remove(log);
        return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    }

    Session loadSession(const BuiltSession& b)
    {
        return SessionStore::load(b.dir);
    }

    ExportResult exportTo(const BuiltSession& b, const fs::path& out, bool force = false, bool overwrite = false)
    {
        ExportOptions o;
        o.outDir = out;
        o.force = force;
        o.overwrite = overwrite;
        o.candidateId = b.candidateId;
        return exportBundle(loadSession(b), b.problem, o);
    }

    std::vector<std::string> refusalCodes(const BuiltSession& b)
    {
        try {
            exportTo(b, kl::test::freshDir("refused"));
        } catch (const ExportRefused& e) {
            std::vector<std::string> codes;
            for (const auto& r : e.refusals())
                codes.push_back(r.code);
            return codes;
        }
        return {};
    }

    bool contains(const std::vector<std::string>& v, const std::string& s)
    {
        return std::find(v.begin(), v.end(), s) != v.end();
    }

    // ---- dispatch plan -------------------------------------------------------------------------------------

    TEST(DispatchPlan, WinningBoxExcludesSlowerAndUntimedShapes)
    {
        const Problem p = loadProblem(fixtureDir("rmsnorm_fx").string());
        std::vector<ShapeResult> shapes;
        for (const auto& o : rmsnormOutcomes())
            shapes.push_back(shapeResult(o));
        const DispatchPlan plan = buildDispatchPlan(p, shapes);
        ASSERT_EQ(plan.candidateRegions.size(), 1u);
        const auto& r = plan.candidateRegions[0];
        EXPECT_EQ(r.ranges[0].lo, 128);
        EXPECT_EQ(r.ranges[0].hi, 65536);
        EXPECT_EQ(r.ranges[1].lo, 1024);
        EXPECT_EQ(r.ranges[1].hi, 16384);
        EXPECT_EQ(r.wins, 6);
        ASSERT_EQ(plan.lossRegions.size(), 1u);
        EXPECT_EQ(plan.lossRegions[0].ranges[0].hi, 1);
        // T=1 lost; T=64 lies between the loss and the first win: not measured, so the fallback serves it.
        Shape s;
        s.dims = { { "T", 1 }, { "H", 4096 } };
        EXPECT_FALSE(plan.inCandidateRegion(s));
        s.dims = { { "T", 64 }, { "H", 4096 } };
        EXPECT_FALSE(plan.inCandidateRegion(s));
        s.dims = { { "T", 3000 }, { "H", 8192 } };
        EXPECT_TRUE(plan.inCandidateRegion(s));
        EXPECT_EQ(plan.verifiedRange[0].lo, 1);
        EXPECT_EQ(plan.verifiedRange[0].hi, 65536);
    }

    TEST(DispatchPlan, LossInsideTheWinsSplitsTheRegionAroundIt)
    {
        const Problem p = loadProblem(fixtureDir("rmsnorm_fx").string());
        std::vector<ShapeResult> shapes;
        for (const auto& o : std::vector<ShapeOutcome> { { { { "T", 128 }, { "H", 1024 } }, true, 1.5 },
                 { { { "T", 1024 }, { "H", 1024 } }, true, 1.4 }, { { { "T", 4096 }, { "H", 1024 } }, true, 0.8 },
                 { { { "T", 16384 }, { "H", 1024 } }, true, 1.3 }, { { { "T", 65536 }, { "H", 1024 } }, false, 1.9 } })
            shapes.push_back(shapeResult(o));
        const DispatchPlan plan = buildDispatchPlan(p, shapes);
        ASSERT_EQ(plan.candidateRegions.size(), 2u);
        EXPECT_EQ(plan.candidateRegions[0].ranges[0].lo, 128);
        EXPECT_EQ(plan.candidateRegions[0].ranges[0].hi, 1024);
        EXPECT_EQ(plan.candidateRegions[1].ranges[0].lo, 16384);
        EXPECT_EQ(plan.candidateRegions[1].ranges[0].hi, 16384);
        for (const auto& r : plan.candidateRegions) {
            for (const auto& pt : plan.points) {
                if (pt.cls == PointClass::Loss) {
                    EXPECT_FALSE(r.contains(plan.valuesOf(pt.shape))) << pt.shape.label();
                }
            }
        }
        // An incorrect shape is a loss even when it was fast.
        EXPECT_EQ(plan.points[4].cls, PointClass::Loss);
        EXPECT_EQ(plan.points[4].why, "incorrect");
    }

    TEST(DispatchPlan, SpeedupWhoseIntervalReachesOneIsNotAWin)
    {
        const Problem p = loadProblem(fixtureDir("rmsnorm_fx").string());
        const DispatchPlan plan
            = buildDispatchPlan(p, { shapeResult({ { { "T", 8 }, { "H", 2048 } }, true, 1.01, 0.03 }) });
        EXPECT_TRUE(plan.candidateRegions.empty());
        EXPECT_EQ(plan.points[0].cls, PointClass::Loss);
    }

    // ---- expressions in C ------------------------------------------------------------------------------------

    TEST(CExpr, TranslationEvaluatesLikeCoreExpressionsWhenCompiled)
    {
        const std::vector<std::string> exprs = { "ceil_div(T, BLOCK*VEC)", "T / 3", "T % 7", "(T + 0.5) / 2",
            "T * 4 > 100 ? 1 : 2", "min(T, H) + max(T, 3)", "div(T, 4)", "next_pow2(T)", "H % (VEC * 32) == 0",
            "!(T > 3) || H >= 4096 && T != 5", "-T + pow(2, 3) + sqrt(16) + log2(8)",
            "floor(T / 2.5) + ceil(T / 2.5) + round(2.5) + abs(-T)",
            // A real operand makes "/" and "%" real even when both values are whole (7.0 / 2 is 3.5).
            "T / 2.0", "7.0 / 2 + T % 2.0", "sqrt(16) / 3", "pow(2, -1) * 8 / 3", "(T > 3 ? 2.0 : 2) / 4",
            "ceil_div(T, 3) / 2" };
        const std::vector<std::pair<double, double>> points
            = { { 1, 1024 }, { 5, 4096 }, { 77, 8190 }, { 4096, 16384 } };
        const ParamValues params { { "BLOCK", 256 }, { "VEC", 8 } };
        std::string c = expressionRuntimeC() + "#include <stdio.h>\nint main(void) {\n";
        std::vector<double> expected;
        for (const auto& [t, h] : points) {
            c += "  { const double kl_d_T = " + std::to_string(t) + ", kl_d_H = " + std::to_string(h) + ";\n";
            for (const auto& e : exprs) {
                const std::string ce = toCExpression(
                    e,
                    [&](const std::string& n) -> std::string {
                        if (params.count(n))
                            return std::to_string(params.at(n)) + ".0";
                        return "kl_d_" + n;
                    },
                    "test");
                c += "    printf(\"%.17g\\n\", " + ce + ");\n";
                expected.push_back(Expr::parse(e).evaluate(bindingsFor(params, { { "T", t }, { "H", h } })));
            }
            c += "    (void)kl_d_T; (void)kl_d_H; }\n";
        }
        c += "  return 0;\n}\n";
        const fs::path dir = kl::test::freshDir("cexpr");
        fs::create_directories(dir);
        std::ofstream(dir / "e.c") << c;
        std::string out;
        ASSERT_EQ(
            runCommand(
                "cc -std=c99 -Wall -Werror -o " + (dir / "e").string() + " " + (dir / "e.c").string() + " -lm", &out),
            0)
            << out;
        ASSERT_EQ(runCommand((dir / "e").string(), &out), 0);
        std::istringstream in(out);
        for (std::size_t i = 0; i < expected.size(); ++i) {
            double v = 0;
            ASSERT_TRUE(in >> v) << "missing value " << i;
            EXPECT_DOUBLE_EQ(v, expected[i]) << exprs[i % exprs.size()] << " at point " << i / exprs.size();
        }
        fs::remove_all(dir);
    }

    TEST(CExpr, LinearDimsAreRecognised)
    {
        LinearDim d;
        ASSERT_TRUE(asLinearDim("T", &d));
        EXPECT_EQ(d.name, "T");
        EXPECT_EQ(d.factor, 1);
        ASSERT_TRUE(asLinearDim("2*I", &d));
        EXPECT_EQ(d.name, "I");
        EXPECT_EQ(d.factor, 2);
        EXPECT_FALSE(asLinearDim("T+1", &d));
        EXPECT_THROW(toCExpression(
                         "T +", [](const std::string& n) { return n; }, "w"),
            InputError);
    }

    TEST(DeviceQualifiers, AddsDeviceToUnannotatedHelpersOnly)
    {
        std::string src
            = "#include <x.h>\n// a comment with f() {\nstatic inline float warp_sum(float v) { return v; }\n"
              "template <int N> float scaled(float v) { return v * N; }\nnamespace detail {\nint helper(int a) { "
              "return a; }\n}\n__device__ int ok(int a) { return a; }\nextern \"C\" __global__ void k(int* p) { "
              "if (p) { p[0] = 1; } }\nstruct S { int f() { return 1; } };\n";
        EXPECT_EQ(detail::addDeviceQualifiers(src), 3);
        EXPECT_NE(src.find("__device__ static inline float warp_sum"), std::string::npos);
        EXPECT_NE(src.find("template <int N> __device__ float scaled"), std::string::npos);
        EXPECT_NE(src.find("__device__ int helper"), std::string::npos);
        EXPECT_EQ(src.find("__device__ __device__"), std::string::npos);
        EXPECT_EQ(src.find("__device__ extern"), std::string::npos);
    }

    // ---- the bundle ----------------------------------------------------------------------------------------

    TEST(Export, HopperCandidateLauncherEncodesItsTensorMapsAndSetsLaunchAttributes)
    {
        // The sm_90 GEMM: two TMA maps over A and B, an SM_COUNT persistent grid, a PDL split-K reduction.
        const fs::path gemm = fs::path(KL_SOURCE_DIR) / "kernels" / "problems" / "gemm_bf16";
        const Problem p = loadProblem(gemm.string());
        const BuiltSession b = buildSessionFrom(gemm, gemm / p.templateFor(90), syntheticOutcomes(p));
        const fs::path out = kl::test::freshDir("hopper");
        exportTo(b, out);
        const std::string launcher = kl::test::readTextFile(out / "src/kl_gemm_bf16_candidate.cu");
        for (const char* map : { "kl_tm_tmA", "kl_tm_tmB" })
            EXPECT_NE(launcher.find(std::string("alignas(64) CUtensorMap ") + map), std::string::npos) << map;
        EXPECT_NE(
            launcher.find("tensorMapEncodeTiled(&kl_tm_tmA, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"), std::string::npos);
        EXPECT_NE(launcher.find("CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B"), std::string::npos);
        EXPECT_NE(launcher.find("cudaGetDriverEntryPointByVersion"), std::string::npos) << "libcuda is not linked";
        EXPECT_NE(launcher.find("kl_device_sm_count()"), std::string::npos);
        EXPECT_NE(launcher.find("cudaLaunchAttributeProgrammaticStreamSerialization"), std::string::npos);
        // cluster=(CM, 1, 1): a cluster attribute only when CM > 1 (CM is 1 at the defaults), and no launch for a
        // grid of 0 (the split-K reduction without splits).
        EXPECT_NE(launcher.find("if (kl_c[0] * kl_c[1] * kl_c[2] > 1) {"), std::string::npos);
        EXPECT_NE(launcher.find("cudaLaunchAttributeClusterDimension"), std::string::npos);
        EXPECT_NE(
            launcher.find("if (kl_g[0] == 0 || kl_g[1] == 0 || kl_g[2] == 0) goto kl_skip_2;"), std::string::npos);
        EXPECT_NE(launcher.find("kl_skip_2:;"), std::string::npos);
        const std::string dispatch = kl::test::readTextFile(out / "src/kl_gemm_bf16_dispatch.c");
        EXPECT_NE(dispatch.find("int kl_gemm_bf16_candidate_tensor_map(int index"), std::string::npos);
        EXPECT_NE(dispatch.find("if (!kl_gemm_bf16_candidate_tensor_map(1, dims, &kl_map, why)) return 0;"),
            std::string::npos)
            << "a shape whose map the driver would refuse goes to the fallback";
        fs::remove_all(out);
        fs::remove_all(b.dir);
    }

    // In-place tensors (fused_add_rmsnorm's x and residual): the C entry point takes them writable, the PyTorch op
    // mutates its arguments (Tensor(a!)) and returns nothing, and the self-test restores them before every call and
    // compares them as results.
    TEST(Export, InPlaceTensorsAreMutableArgumentsOfTheEntryPointsAndTheirSelfTest)
    {
        const fs::path folder = fs::path(KL_SOURCE_DIR) / "kernels" / "problems" / "fused_add_rmsnorm";
        const Problem p = loadProblem(folder.string());
        const BuiltSession b = buildSessionFrom(folder, folder / p.templateFile, syntheticOutcomes(p));
        const fs::path out = kl::test::freshDir("in-place");
        exportTo(b, out);
        const std::string api = kl::test::readTextFile(out / "include/kl_fused_add_rmsnorm.h");
        EXPECT_NE(api.find("x: bf16 [T, H] input and output, updated in place"), std::string::npos) << api;
        EXPECT_NE(api.find("w: bf16 [H] input"), std::string::npos) << api;
        EXPECT_NE(api.find("void* x, void* residual, const void* w"), std::string::npos) << api;
        const std::string op = kl::test::readTextFile(out / "torch/kl_fused_add_rmsnorm_op.cpp");
        EXPECT_NE(op.find("run(Tensor(a!) x, Tensor(b!) residual, Tensor w, float eps=1e-05) -> ()"), std::string::npos)
            << op;
        EXPECT_NE(op.find("void call(int which"), std::string::npos) << op;
        for (const char* t : { "x", "residual" })
            EXPECT_EQ(op.find(std::string("at::Tensor ") + t + " = at::empty"), std::string::npos)
                << t << " is the caller's tensor, not a new result";
        EXPECT_NE(op.find("x.data_ptr(), residual.data_ptr(), w.data_ptr()"), std::string::npos) << op;
        const std::string selftest = kl::test::readTextFile(out / "test/selftest.cu");
        EXPECT_NE(selftest.find("{\"x\", KL_BF16, true, true,"), std::string::npos) << selftest;
        EXPECT_NE(selftest.find("{\"w\", KL_BF16, false, false,"), std::string::npos);
        EXPECT_NE(selftest.find("static const bool kInPlace = true;"), std::string::npos);
        EXPECT_NE(selftest.find("toDevice(info[t].kind, pristine[t], buf[t]);"), std::string::npos);
        // A FlashInfer-Bench definition cannot say "both": exporting there is refused, naming the tensor.
        flashinfer_bench::ExportOptions fo;
        fo.outDir = kl::test::freshDir("fib-in-place");
        try {
            flashinfer_bench::exportSolution(loadSession(b), b.problem, fo);
            ADD_FAILURE() << "an in-place problem exported as a FlashInfer-Bench solution";
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find("updates tensor 'x' in place"), std::string::npos) << e.what();
        }
        fs::remove_all(fo.outDir);
        fs::remove_all(out);
        fs::remove_all(b.dir);
    }

    TEST(Export, WritesACompleteBundleWithHashesAndProvenance)
    {
        const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes());
        const fs::path out = kl::test::freshDir("bundle");
        const ExportResult r = exportTo(b, out);
        EXPECT_FALSE(r.forced);
        for (const char* f : { "manifest.json", "CMakeLists.txt", "README.md", "include/kl_rmsnorm_fx.h",
                 "include/kl_rmsnorm_fx_dispatch.h", "src/kl_rmsnorm_fx_candidate.cuh",
                 "src/kl_rmsnorm_fx_candidate.cu", "src/kl_rmsnorm_fx_fallback.cuh", "src/kl_rmsnorm_fx_fallback.cu",
                 "src/kl_rmsnorm_fx_run.cu", "src/kl_rmsnorm_fx_dispatch.c", "src/kl_expr.h", "test/selftest.cu",
                 "test/dispatch_test.c", "torch/kl_rmsnorm_fx_op.cpp", "torch/kl_rmsnorm_fx.py" })
            EXPECT_TRUE(fs::exists(out / f)) << f;

        Json man = Json::parse(kl::test::readTextFile(out / "manifest.json"));
        EXPECT_EQ(man["session_id"], "s-rmsnorm_fx");
        EXPECT_EQ(man["candidate"]["id"], b.candidateId);
        EXPECT_EQ(man["candidate"]["baked_params"]["BLOCK"], 128);
        EXPECT_EQ(man["lineage"].size(), 2u);
        EXPECT_EQ(man["lineage"][0]["id"], b.rootId);
        EXPECT_EQ(man["hypotheses"][0]["text"], "Split the row reduction across blocks");
        EXPECT_EQ(man["device"]["name"], "NVIDIA H200");
        EXPECT_NE(man["device"].dump().find("580.95.05"), std::string::npos);
        EXPECT_EQ(man["device"].dump().find("fbeadc78"), std::string::npos) << "GPU uuid identifies the user's machine";
        EXPECT_EQ(man["evaluation"]["shapes"].size(), rmsnormOutcomes().size());
        Json& s0 = man["evaluation"]["shapes"][3];
        EXPECT_TRUE(s0["correct"].get<bool>());
        EXPECT_GT(s0["timing"]["ci95_high_us"].get<double>(), s0["timing"]["ci95_low_us"].get<double>());
        EXPECT_NEAR(s0["speedup"]["median"].get<double>(), 1.52, 1e-9);
        EXPECT_EQ(man["referee"]["verdict"], "accepted");
        EXPECT_EQ(man["dispatch"]["candidate_regions"].size(), 1u);
        EXPECT_EQ(man["dispatch"]["fallback"]["kind"], "reference-kernel");
        EXPECT_FALSE(man["exported"]["forced"].get<bool>());

        // Every file but the manifest is hashed, and the hashes are of the bytes on disk.
        std::size_t hashed = 0;
        for (const auto& entry : fs::recursive_directory_iterator(out)) {
            if (!entry.is_regular_file())
                continue;
            const std::string rel = fs::relative(entry.path(), out).generic_string();
            if (rel == "manifest.json")
                continue;
            ASSERT_TRUE(man["files"].contains(rel)) << rel;
            EXPECT_EQ(man["files"][rel], sha256Hex(kl::test::readTextFile(entry.path()))) << rel;
            ++hashed;
        }
        EXPECT_EQ(hashed, man["files"].size());

        // The kernel carries its parameters, its provenance and the ranges.
        const std::string kernel = kl::test::readTextFile(out / "src/kl_rmsnorm_fx_candidate.cuh");
        EXPECT_NE(kernel.find("#define BLOCK 128"), std::string::npos);
        EXPECT_NE(kernel.find("#define VEC 8"), std::string::npos);
        EXPECT_NE(kernel.find("session s-rmsnorm_fx"), std::string::npos);
        EXPECT_NE(kernel.find("sm_90a"), std::string::npos);
        EXPECT_NE(kernel.find("__device__ static inline float warp_sum"), std::string::npos);
        const std::string api = kl::test::readTextFile(out / "include/kl_rmsnorm_fx.h");
        EXPECT_NE(api.find("T in [128, 65536], H in [1024, 16384]  ->  candidate"), std::string::npos) << api;
        EXPECT_NE(api.find("everywhere else  ->  fallback"), std::string::npos);
        EXPECT_NE(api.find("cudaStream_t stream"), std::string::npos);
        // No allocation or synchronization in the launcher.
        for (const char* f :
            { "src/kl_rmsnorm_fx_candidate.cu", "src/kl_rmsnorm_fx_fallback.cu", "src/kl_rmsnorm_fx_run.cu" }) {
            const std::string launcher = kl::test::readTextFile(out / f);
            for (const char* banned : { "cudaMalloc", "Synchronize", "malloc(", "new " })
                EXPECT_EQ(launcher.find(banned), std::string::npos) << f << " contains " << banned;
        }
        fs::remove_all(out);
        fs::remove_all(b.dir);
    }

    TEST(Export, DefaultCandidateIsTheBestAccepted)
    {
        const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes());
        EXPECT_EQ(defaultCandidate(loadSession(b)), b.candidateId);
        fs::remove_all(b.dir);
    }

    TEST(Export, TheLoopsAcceptanceRecordIsNotAFlag)
    {
        // Every candidate the loop accepts carries its decision ("decide.faster", non-blocking); a real H200 session
        // was refused for it once.
        const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes(), Verdict::Accepted,
            { { "decide.faster", "faster than best c0002: 1.014x", 0, false } });
        EXPECT_TRUE(refusalCodes(b).empty());
        fs::remove_all(b.dir);
    }

    TEST(Export, RefusesPendingFlaggedIncorrectAndUncoveredCandidates)
    {
        {
            const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes(), Verdict::PendingReview,
                { { "physics.suspicious-jump", "2.4x over the current best", 0, false } });
            const auto codes = refusalCodes(b);
            EXPECT_TRUE(contains(codes, "pending-review"));
            EXPECT_TRUE(contains(codes, "flagged"));
            fs::remove_all(b.dir);
        }
        {
            // Flagged, then approved by the engineer: exportable, the flag recorded.
            const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes(), Verdict::PendingReview,
                { { "physics.suspicious-jump", "2.4x over the current best", 0, false } });
            {
                auto store = SessionStore::open(b.dir);
                store->recordReview({ b.candidateId, true, "checked the profile: real", 1764470100000 });
            }
            const fs::path out = kl::test::freshDir("approved");
            const ExportResult r = exportTo(b, out);
            Json man = Json::parse(kl::test::readTextFile(out / "manifest.json"));
            EXPECT_EQ(man["referee"]["reviews"][0]["approved"], true);
            EXPECT_EQ(man["referee"]["reasons"][0]["rule"], "physics.suspicious-jump");
            fs::remove_all(out);
            fs::remove_all(b.dir);
        }
        {
            // Accepted by status but carrying an unreviewed flag.
            const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes(), Verdict::Accepted,
                { { "static.shape-special-case", "branch on H == 4096", 17, false } });
            EXPECT_TRUE(contains(refusalCodes(b), "flagged"));
            fs::remove_all(b.dir);
        }
        {
            auto outcomes = rmsnormOutcomes();
            outcomes[5].correct = false;
            const BuiltSession b = buildSession("rmsnorm_fx", outcomes);
            EXPECT_TRUE(contains(refusalCodes(b), "incorrect-shape"));
            fs::remove_all(b.dir);
        }
        {
            // Never verified at the longest context it claims.
            auto outcomes = rmsnormOutcomes();
            outcomes.erase(outcomes.begin() + 5, outcomes.begin() + 7);
            const BuiltSession b = buildSession("rmsnorm_fx", outcomes);
            const auto codes = refusalCodes(b);
            ASSERT_TRUE(contains(codes, "range-not-covered"));
            try {
                exportTo(b, kl::test::freshDir("x"));
            } catch (const ExportRefused& e) {
                EXPECT_NE(std::string(e.what()).find("dim T is claimed on [1, 65536] but verified only on [1, 20000]"),
                    std::string::npos)
                    << e.what();
            }
            fs::remove_all(b.dir);
        }
        {
            auto outcomes = rmsnormOutcomes();
            for (auto& o : outcomes)
                o.heldOut = false;
            const BuiltSession b = buildSession("rmsnorm_fx", outcomes);
            EXPECT_TRUE(contains(refusalCodes(b), "no-held-out"));
            fs::remove_all(b.dir);
        }
        {
            const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes(), Verdict::Rejected,
                { { "correctness.rel-l2", "rel L2 0.4 at T=1,H=1024", 0, true } });
            const auto codes = refusalCodes(b);
            EXPECT_TRUE(contains(codes, "not-accepted"));
            EXPECT_TRUE(contains(codes, "referee-rejected"));
            fs::remove_all(b.dir);
        }
    }

    TEST(Export, ForceWritesTheRefusalsLoudly)
    {
        auto outcomes = rmsnormOutcomes();
        outcomes[6].correct = false;
        const BuiltSession b = buildSession("rmsnorm_fx", outcomes);
        const fs::path out = kl::test::freshDir("forced");
        const ExportResult r = exportTo(b, out, /*force=*/true);
        EXPECT_TRUE(r.forced);
        Json man = Json::parse(kl::test::readTextFile(out / "manifest.json"));
        EXPECT_TRUE(man["exported"]["forced"].get<bool>());
        EXPECT_TRUE(man.contains("FORCED_EXPORT"));
        EXPECT_EQ(man["exported"]["refusals"][0]["code"], "incorrect-shape");
        for (const char* f : { "include/kl_rmsnorm_fx.h", "src/kl_rmsnorm_fx_candidate.cuh", "README.md" })
            EXPECT_NE(kl::test::readTextFile(out / f).find("FORCED EXPORT"), std::string::npos) << f;
        // The incorrect shape is outside every candidate region.
        for (const auto& reg : r.plan.dispatch.candidateRegions)
            EXPECT_FALSE(reg.contains({ 65536, 16384 }));
        fs::remove_all(out);
        fs::remove_all(b.dir);
    }

    TEST(Export, AScreenNeverExportsNotAsTheDefaultNorForced)
    {
        // A multi-fidelity screen records an objective from a few samples; it must never reach a bundle.
        const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes(), Verdict::Correct);
        Session s = loadSession(b);
        s.evaluations.at(b.candidateId).fidelity = Fidelity { 5, 1 };
        EXPECT_THROW(defaultCandidate(s, true), InputError) << "the only evaluated candidate is a screen";
        ExportOptions o;
        o.outDir = kl::test::freshDir("screen");
        o.candidateId = b.candidateId;
        o.force = true;
        try {
            exportBundle(s, b.problem, o);
            ADD_FAILURE() << "a screen was exported";
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find("only screened (screen:5x1"), std::string::npos) << e.what();
        }
        EXPECT_FALSE(fs::exists(o.outDir / "manifest.json"));
        fs::remove_all(o.outDir);
        fs::remove_all(b.dir);
    }

    TEST(Export, ForcedExportWithoutAnAcceptedCandidateTakesTheBestEvaluated)
    {
        const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes(), Verdict::PendingReview,
            { { "physics.suspicious-jump", "2.4x over the current best", 0, false } });
        const Session s = loadSession(b);
        EXPECT_THROW(defaultCandidate(s), InputError);
        EXPECT_EQ(defaultCandidate(s, true), b.candidateId);
        ExportOptions o;
        o.outDir = kl::test::freshDir("forced-default");
        EXPECT_THROW(exportBundle(s, b.problem, o), InputError);
        o.force = true;
        const ExportResult r = exportBundle(s, b.problem, o);
        EXPECT_TRUE(r.forced);
        EXPECT_EQ(r.plan.candidateId, b.candidateId);
        EXPECT_NE(
            kl::test::readTextFile(o.outDir / "include/kl_rmsnorm_fx.h").find("!!! pending-review"), std::string::npos);
        fs::remove_all(o.outDir);
        fs::remove_all(b.dir);
    }

    TEST(Export, OverwriteIsExplicitAndOnlyReplacesABundle)
    {
        const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes());
        const fs::path out = kl::test::freshDir("over");
        exportTo(b, out);
        EXPECT_THROW(exportTo(b, out), InputError);
        std::ofstream(out / "src" / "stale.txt") << "old";
        EXPECT_NO_THROW(exportTo(b, out, false, true));
        EXPECT_FALSE(fs::exists(out / "src" / "stale.txt"));
        const fs::path foreign = kl::test::freshDir("foreign");
        fs::create_directories(foreign);
        std::ofstream(foreign / "thesis.tex") << "precious";
        EXPECT_THROW(exportTo(b, foreign, false, true), InputError);
        EXPECT_TRUE(fs::exists(foreign / "thesis.tex"));
        fs::remove_all(out);
        fs::remove_all(foreign);
        fs::remove_all(b.dir);
    }

    // Every file manifest.json lists is there with the hash it lists; "" when so, else what is missing or wrong.
    std::string incompleteness(const fs::path& bundle)
    {
        if (!fs::exists(bundle / "manifest.json"))
            return "no manifest.json";
        const Json man = Json::parse(kl::test::readTextFile(bundle / "manifest.json"));
        std::string why;
        for (const auto& [path, hash] : man.at("files").items())
            if (!fs::exists(bundle / path))
                why += path + " missing; ";
            else if (sha256Hex(kl::test::readTextFile(bundle / path)) != hash.get<std::string>())
                why += path + " differs; ";
        return why;
    }

    std::vector<std::string> entriesBeside(const fs::path& out)
    {
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(out.parent_path()))
            if (e.path().filename().string().find(out.filename().string()) != std::string::npos && e.path() != out)
                names.push_back(e.path().filename().string());
        return names;
    }

    TEST(Export, OverwriteSwapsInAWholeBundleAndClearsWhatAnInterruptedExportLeft)
    {
        const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes());
        const fs::path parent = kl::test::freshDir("swap");
        const fs::path out = parent / "bundle";
        exportTo(b, out);
        ASSERT_EQ(incompleteness(out), "");
        // What a kill -9 in the middle of the next export leaves beside the bundle: a staging folder with some
        // files and the partial-export marker.
        const fs::path leftover = parent / ".bundle.kl-export-4242";
        fs::create_directories(leftover / "src");
        std::ofstream(leftover / ".kl-export-partial") << "interrupted";
        std::ofstream(leftover / "src" / "half.cu") << "__global__ void k(";
        std::ofstream(out / "src" / "stale.txt") << "old";
        const ExportResult r = exportTo(b, out, false, true);
        EXPECT_EQ(incompleteness(out), "");
        EXPECT_FALSE(fs::exists(out / "src" / "stale.txt")) << "the old bundle is replaced whole";
        EXPECT_FALSE(fs::exists(out / ".kl-export-partial"));
        EXPECT_EQ(entriesBeside(out), std::vector<std::string> {}) << "staging and leftovers are gone";
        std::size_t files = 0;
        for (const auto& e : fs::recursive_directory_iterator(out))
            files += e.is_regular_file();
        EXPECT_EQ(files, r.files.size());
        fs::remove_all(parent);
        fs::remove_all(b.dir);
    }

    // QA row 135: the hint named --problems, which does not exist.
    TEST(Export, AMissingProblemFolderNamesTheFlagThatExists)
    {
        Session s;
        s.id = "lost";
        s.problemName = "nonexistent_problem";
        s.problemFolder = "/nonexistent/x";
        try {
            kl::findSessionProblemFolder(s, {}, {}, { fs::path(KL_SOURCE_DIR) / "kernels" / "problems" });
            FAIL();
        } catch (const InputError& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find("pass --problem NAME|DIR"), std::string::npos) << what;
            EXPECT_EQ(what.find("--problems"), std::string::npos) << what;
            EXPECT_NE(what.find("/nonexistent/x"), std::string::npos) << what;
        }
    }

    TEST(Export, NoSecretPromptOrLocalPathReachesTheBundle)
    {
        const std::string key = "sk-kltest0123456789abcdefghijklmnop";
        ::setenv("KL_EXPORT_TEST_API_KEY", key.c_str(), 1);
        const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
        const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes(), Verdict::Accepted, {},
            "Profile in /home/alice/traces/run3.nsys-rep shows the reduction is serial; key " + key,
            "// tuned from " + home + "/kernels/rms.cu with token " + key + "\n");
        {
            auto store = SessionStore::open(b.dir);
            store->agentMessage({ { "role", "user" }, { "prompt", "SYSTEM PROMPT: you are a kernel engineer" } });
        }
        const fs::path out = kl::test::freshDir("leaks");
        exportTo(b, out);
        const std::vector<std::string> forbidden = { key, "/home/alice", home + "/", b.dir.string(), out.string(),
            fixtureDir("rmsnorm_fx").string(), "SYSTEM PROMPT", KL_SOURCE_DIR };
        std::size_t scanned = 0;
        for (const auto& entry : fs::recursive_directory_iterator(out)) {
            if (!entry.is_regular_file())
                continue;
            const std::string content = kl::test::readTextFile(entry.path());
            for (const auto& f : forbidden)
                EXPECT_EQ(content.find(f), std::string::npos) << entry.path().filename() << " contains " << f;
            EXPECT_TRUE(findLeaks(content, { key }, { home }).empty()) << entry.path().filename();
            ++scanned;
        }
        EXPECT_GE(scanned, 15u);
        // The hypothesis is kept, with the path and key redacted.
        Json man = Json::parse(kl::test::readTextFile(out / "manifest.json"));
        const std::string text = man["hypotheses"][0]["text"];
        EXPECT_NE(text.find("reduction is serial"), std::string::npos);
        EXPECT_NE(text.find("<redacted>"), std::string::npos);
        ::unsetenv("KL_EXPORT_TEST_API_KEY");
        fs::remove_all(out);
        fs::remove_all(b.dir);
    }

    TEST(Export, LeakScannerFindsPathsAndKeys)
    {
        EXPECT_FALSE(findLeaks("see /home/bob/x.cu", {}, {}).empty());
        EXPECT_FALSE(findLeaks("see /Users/bob/x.cu", {}, {}).empty());
        EXPECT_FALSE(findLeaks("Authorization: Bearer abcdefghijklmnopqrstuvwxyz", {}, {}).empty());
        EXPECT_FALSE(findLeaks("x = 1; // hunter2hunter2", { "hunter2hunter2" }, {}).empty());
        EXPECT_FALSE(findLeaks("built in /srv/me/proj", {}, { "/srv/me" }).empty());
        EXPECT_TRUE(findLeaks("#include <cuda_bf16.h>\nint T = 4096; // sm_90a\n", {}, { "/srv/me" }).empty());
    }

    // ---- the dispatcher on the CPU -------------------------------------------------------------------------

    TEST(ExportDispatch, GeneratedDispatcherPicksTheFallbackOutsideTheVerifiedRange)
    {
        const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes());
        const fs::path out = kl::test::freshDir("dispatch");
        exportTo(b, out);
        // The bundle's own probe test (expectations computed by the exporter).
        std::string log;
        const std::string inc = " -I" + (out / "include").string() + " -I" + (out / "src").string();
        ASSERT_EQ(runCommand("cc -std=c99 -Wall -Wextra -Werror" + inc + " -o " + (out / "dt").string() + " "
                          + (out / "test/dispatch_test.c").string() + " "
                          + (out / "src/kl_rmsnorm_fx_dispatch.c").string() + " -lm",
                      &log),
            0)
            << log;
        ASSERT_EQ(runCommand((out / "dt").string(), &log), 0) << log;
        EXPECT_NE(log.find("probe shapes dispatched as expected"), std::string::npos);

        // Hand-written expectations from the measurements in rmsnormOutcomes().
        const std::string driver = R"(#include "kl_rmsnorm_fx_dispatch.h"
#include <stdio.h>
int main(void) {
    static const long long cases[][3] = {
        {1, 4096, 0},       /* measured slower at one token */
        {1, 1024, 0},
        {64, 4096, 0},      /* between the loss and the first win: never measured */
        {128, 4096, 1},     /* measured faster */
        {4096, 8192, 1},    /* inside the box of wins */
        {65536, 16384, 1},
        {4096, 8194, 0},    /* in the box, but the candidate's constraint H % VEC fails */
        {65537, 4096, 0},   /* outside the problem's validity range */
        {4096, 20000, 0},
        {4096, 1023, 0},
        {4096, 1025, 0},    /* not a multiple of 2 */
    };
    int i, bad = 0;
    for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); ++i) {
        kl_rmsnorm_fx_dims d;
        const char* why = 0;
        int got;
        d.T = cases[i][0];
        d.H = cases[i][1];
        got = kl_rmsnorm_fx_select_why(&d, &why);
        printf("T=%lld H=%lld -> %d (%s)\n", d.T, d.H, got, why ? why : "");
        if (got != (int)cases[i][2]) ++bad;
    }
    if (kl_rmsnorm_fx_region_count() != 1) ++bad;
    if (kl_rmsnorm_fx_workspace_bytes(&(kl_rmsnorm_fx_dims){4096, 4096}) != 4096 * 4) ++bad;
    return bad;
}
)";
        std::ofstream(out / "mine.c") << driver;
        ASSERT_EQ(runCommand("cc -std=c99 -Wall -Werror" + inc + " -o " + (out / "mine").string() + " "
                          + (out / "mine.c").string() + " " + (out / "src/kl_rmsnorm_fx_dispatch.c").string() + " -lm",
                      &log),
            0)
            << log;
        EXPECT_EQ(runCommand((out / "mine").string(), &log), 0) << log;
        fs::remove_all(out);
        fs::remove_all(b.dir);
    }

} // namespace
} // namespace kl

namespace kl {
namespace {

    TEST(ExportCli, KloopExportWritesRefusesAndNeedsOverwrite)
    {
        const fs::path kloop = fs::path(KL_BINARY_DIR) / "cli" / "kloop";
        if (!fs::exists(kloop))
            GTEST_SKIP() << "kloop not built";
        const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes());
        const fs::path out = kl::test::freshDir("cli");
        std::string log;
        ASSERT_EQ(
            runCommand(kloop.string() + " export " + b.dir.string() + " --out " + out.string() + " --json", &log), 0)
            << log;
        const auto brace = log.find('{');
        ASSERT_NE(brace, std::string::npos) << log;
        const Json j = Json::parse(log.substr(brace));
        EXPECT_EQ(j.at("candidate"), b.candidateId);
        EXPECT_EQ(j.at("candidate_regions").size(), 1u);
        EXPECT_TRUE(fs::exists(out / "manifest.json"));
        EXPECT_EQ(runCommand(kloop.string() + " export " + b.dir.string() + " --out " + out.string(), &log), 1);
        EXPECT_NE(log.find("--overwrite"), std::string::npos) << log;
        EXPECT_EQ(
            runCommand(kloop.string() + " export " + b.dir.string() + " --out " + out.string() + " --overwrite", &log),
            0)
            << log;
        EXPECT_NE(log.find("candidate  T in [128, 65536], H in [1024, 16384]"), std::string::npos) << log;
        EXPECT_EQ(runCommand(kloop.string() + " export " + b.dir.string(), &log), 2);
        // The root candidate was never evaluated: refused with the reason.
        EXPECT_EQ(runCommand(kloop.string() + " export " + b.dir.string() + " --candidate " + b.rootId + " --out "
                          + kl::test::freshDir("cli2").string(),
                      &log),
            1);
        EXPECT_NE(log.find("not-evaluated"), std::string::npos) << log;
        fs::remove_all(out);
        fs::remove_all(b.dir);
    }

    // kill -9 at any instant of `kloop export --overwrite` leaves a complete bundle at the destination (the old one
    // or the new one), never the old manifest over a partial set of files.
    TEST(ExportCli, KillNineDuringOverwriteNeverLeavesAPartialBundle)
    {
        const fs::path kloop = fs::path(KL_BINARY_DIR) / "cli" / "kloop";
        if (!fs::exists(kloop))
            GTEST_SKIP() << "kloop not built";
        const BuiltSession b = buildSession("rmsnorm_fx", rmsnormOutcomes());
        const fs::path parent = kl::test::freshDir("kill9");
        const fs::path out = parent / "bundle";
        std::string log;
        const auto t0 = std::chrono::steady_clock::now();
        ASSERT_EQ(runCommand(kloop.string() + " export " + b.dir.string() + " --out " + out.string(), &log), 0) << log;
        const auto oneExport = std::chrono::steady_clock::now() - t0;
        constexpr int kTrials = 40;
        for (int i = 0; i < kTrials; ++i) {
            const std::string cmd = "exec " + kloop.string() + " export " + b.dir.string() + " --out " + out.string()
                + " --overwrite > /dev/null 2>&1";
            pid_t pid = -1;
            const char* argv[] = { "/bin/sh", "-c", cmd.c_str(), nullptr };
            ASSERT_EQ(::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
            std::this_thread::sleep_for(oneExport * i / kTrials);
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
            ASSERT_EQ(incompleteness(out), "") << "after a kill at " << i << "/" << kTrials << " of an export";
        }
        // QA row 246: a killed first export leaves nothing at the destination (only a staging folder beside it),
        // so the next plain export is no dead end.
        for (int i = 0; i < 10; ++i) {
            const fs::path fresh = parent / ("fresh" + std::to_string(i));
            const std::string cmd = "exec " + kloop.string() + " export " + b.dir.string() + " --out " + fresh.string()
                + " > /dev/null 2>&1";
            pid_t pid = -1;
            const char* argv[] = { "/bin/sh", "-c", cmd.c_str(), nullptr };
            ASSERT_EQ(::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
            std::this_thread::sleep_for(oneExport * i / 10);
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
            if (fs::exists(fresh)) {
                EXPECT_EQ(incompleteness(fresh), "") << "after a kill at " << i << "/10 of a first export";
            }
            EXPECT_EQ(runCommand(kloop.string() + " export " + b.dir.string() + " --out " + fresh.string(), &log),
                fs::exists(fresh) && !fs::is_empty(fresh) ? 1 : 0)
                << log;
            EXPECT_EQ(incompleteness(fresh), "");
            EXPECT_EQ(entriesBeside(fresh), std::vector<std::string> {});
        }
        // The next --overwrite clears whatever the kills left beside the bundle.
        ASSERT_EQ(
            runCommand(kloop.string() + " export " + b.dir.string() + " --out " + out.string() + " --overwrite", &log),
            0)
            << log;
        EXPECT_EQ(incompleteness(out), "");
        EXPECT_EQ(entriesBeside(out), std::vector<std::string> {});
        fs::remove_all(parent);
        fs::remove_all(b.dir);
    }

} // namespace
} // namespace kl
