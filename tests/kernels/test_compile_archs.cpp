// Cheap GPUs: every shipped problem's reference, baseline and template (and the architecture template that seeds
// sessions there) compile at their defaults (NVRTC, no GPU) for each architecture the problem declares among
// sm_75 .. sm_90a; the architectures it does not declare are skipped only where its sources really do not compile;
// and the tuner's device-limit pruning drops the parameter values that need a newer architecture (softmax
// CLUSTER > 1 below sm_90) and keeps them on sm_90.
// decode_attention's sm_80 tensor-core template across its space, and its split grid against its workspace (the sm_90
// template's checks are in test_decode_attention_sm90.cpp).
#include "agent/tuner/search_space.h"
#include "agent/tuner/tuner_agent.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/loop_device_limits.h"
#include "kernels/nvrtc_compiler.h"
#include "kernels/referee/referee.h"
#include "kernels/shape_sampler.h"
#include "tests/kernels/tensor_core_compile_check.h"
#include "tests/support/text_file.h"

#include <filesystem>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <random>
#include <set>
#include <sstream>

namespace {

const char* const kArchs[] = { "sm_75", "sm_80", "sm_86", "sm_89", "sm_90a" };

std::filesystem::path problemsDir()
{
    return std::filesystem::path(KL_SOURCE_DIR) / "kernels" / "problems";
}

std::vector<kl::Problem> shippedProblems()
{
    std::vector<kl::Problem> out;
    for (const auto& entry : std::filesystem::directory_iterator(problemsDir()))
        if (std::filesystem::exists(entry.path() / "problem.json"))
            out.push_back(kl::loadProblem(entry.path().string()));
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return out;
}

kl::CompileJob jobFor(const std::string& source, const std::string& arch)
{
    kl::CompileJob job;
    job.source = source;
    const kl::KernelSpec spec = kl::parseKernelSpec(source);
    job.params = spec.defaults();
    job.arch = arch;
    for (const auto& l : spec.launches)
        job.kernels.push_back(l.kernel);
    return job;
}

std::filesystem::path freshCacheDir()
{
    auto dir
        = std::filesystem::temp_directory_path() / ("kl-test-cache-archs-" + std::to_string(std::random_device {}()));
    std::filesystem::remove_all(dir);
    return dir;
}

using kl::test::deviceModel;

} // namespace

TEST(ProblemArchs, ShippedProblemsDeclareTheirOldestArchitecture)
{
    std::map<std::string, int> minArch;
    for (const auto& p : shippedProblems())
        minArch[p.name] = p.minArch;
    // bf16 tensor-core MMA (wmma on __nv_bfloat16) starts at sm_80; the others run on Turing.
    // dsa_indexer's template multiplies on the bf16 tensor cores (mma.sync m16n8k16).
    const std::map<std::string, int> expected
        = { { "add_rmsnorm", 75 }, { "decode_attention", 75 }, { "dsa_indexer", 80 }, { "dsa_topk", 75 },
              { "fused_add_rmsnorm", 75 }, { "gemm_bf16", 80 }, { "mla_decode", 75 }, { "rmsnorm", 75 },
              { "rotary_embedding", 75 }, { "silu_and_mul", 75 }, { "softmax", 75 }, { "sparse_mla_decode", 75 } };
    EXPECT_EQ(minArch, expected);
}

TEST(ProblemArchs, EverySourceCompilesAtItsDefaultsOnEveryDeclaredArch)
{
    kl::NvrtcCompiler compiler(freshCacheDir(), 2);
    struct Entry {
        std::string label;
        std::future<std::shared_ptr<const kl::CompiledModule>> module;
    };
    std::vector<Entry> supported;
    std::map<std::string, std::vector<Entry>> skipped; // problem@arch -> its sources' compiles
    std::set<std::string> skippedLabels;
    for (const auto& p : shippedProblems()) {
        const std::filesystem::path dir = problemsDir() / p.name;
        for (const char* arch : kArchs) {
            const int n = *kl::archNumber(arch);
            const std::string where = p.name + "@" + arch;
            if (!p.supportsArch(n)) {
                const std::string why = p.archRefusal(n);
                EXPECT_NE(why.find("min_arch"), std::string::npos) << where << ": " << why;
                EXPECT_NE(why.find(kl::archName(p.minArch)), std::string::npos) << where << ": " << why;
                skippedLabels.insert(where);
            } else {
                EXPECT_EQ(p.archRefusal(n), "") << where;
            }
            std::vector<std::string> files { p.referenceFile, p.baselineFile, p.templateFile };
            if (p.templateFor(n) != p.templateFile)
                files.push_back(p.templateFor(n)); // the template that seeds sessions there
            for (const auto& file : files) {
                const std::string src = kl::test::readTextFile(dir / file);
                const kl::KernelSpec spec = kl::parseKernelSpec(src);
                if (p.supportsArch(n)) {
                    // The defaults are a valid configuration there: the loop seeds the template with them.
                    kl::DeviceInfo archOnly;
                    archOnly.arch = arch;
                    const auto why = kl::checkDeviceLimits(spec, spec.defaults(), kl::shapesOf(p), archOnly);
                    EXPECT_FALSE(why.has_value()) << where << " " << file << ": " << (why ? why->message : "");
                    supported.push_back({ where + " " + file, compiler.submit(jobFor(src, arch)) });
                } else {
                    skipped[where].push_back({ where + " " + file, compiler.submit(jobFor(src, arch)) });
                }
            }
        }
    }
    // gemm_bf16 and dsa_indexer do not support sm_75; the skips are reported, not silent.
    EXPECT_EQ(skippedLabels, (std::set<std::string> { "dsa_indexer@sm_75", "gemm_bf16@sm_75" }));
    // Plus the architecture templates where they seed: decode_attention's sm_80 one on sm_80 .. sm_89 and its sm_90
    // one on sm_90a, gemm_bf16's, sparse_mla_decode's and dsa_indexer's on sm_90a.
    EXPECT_EQ(supported.size(), (12 * 5 - 2) * 3u + 4 + 1 + 1 + 1);
    for (auto& e : supported) {
        const auto m = e.module.get();
        EXPECT_TRUE(m->report.ok) << e.label << ":\n" << m->report.log;
        EXPECT_EQ(m->cubin.substr(0, 4),
            std::string("\x7f"
                        "ELF"))
            << e.label;
        EXPECT_FALSE(m->report.kernels.empty()) << e.label;
    }
    // A declared minimum is needed, not merely cautious: some source of the problem fails to compile there.
    for (auto& [where, entries] : skipped) {
        bool anyFailed = false;
        for (auto& e : entries)
            anyFailed |= !e.module.get()->report.ok;
        EXPECT_TRUE(anyFailed) << where << " compiles at its defaults: lower the problem's min_arch";
    }
}

// The harness binds each plan before it runs: every shipped reference, baseline and template at its defaults fits an
// H200 (threads, grid, shared memory) at every shape a request may carry, held-out extremes and random shapes included.
TEST(ProblemArchs, EveryLaunchPlanFitsAnH200AtEveryShapeTheHarnessRuns)
{
    const kl::DeviceInfo h200 = deviceModel(9, 0, 227, 2048);
    for (const auto& p : shippedProblems()) {
        std::vector<kl::Shape> shapes = kl::shapesOf(p);
        for (const auto& s : kl::heldOutShapes(p, 40, 7))
            shapes.push_back(p.withConstants(s));
        for (const auto& file : { p.referenceFile, p.baselineFile, p.templateFor(90) }) {
            const kl::KernelSpec spec = kl::parseKernelSpec(kl::test::readTextFile(problemsDir() / p.name / file));
            const auto why = kl::checkDeviceLimits(spec, spec.defaults(), shapes, h200);
            EXPECT_FALSE(why.has_value()) << p.name << "/" << file << ": " << (why ? why->message : "");
        }
    }
}

// `kloop run --agent tuner:*` enumerates each template's declared space over the problem's tuning shapes; a template
// whose value lists multiply past the tuner's limit fails the session before its first candidate.
TEST(ProblemArchs, EveryTemplateSpaceIsOneTheTunerEnumerates)
{
    const kl::DeviceInfo h200 = deviceModel(9, 0, 227, 2048);
    const std::size_t limit = kl::TunerOptions {}.maxDeclaredSpace;
    for (const auto& p : shippedProblems()) {
        std::set<std::string> templates { p.templateFile };
        for (const auto& [arch, file] : p.archTemplates)
            templates.insert(file);
        for (const auto& file : templates) {
            const kl::KernelSpec spec = kl::parseKernelSpec(kl::test::readTextFile(problemsDir() / p.name / file));
            try {
                const auto space = kl::tuner::SearchSpace::build(spec, kl::shapesOf(p), h200, limit);
                EXPECT_GT(space.size(), 0u) << p.name << "/" << file;
            } catch (const kl::InputError& e) {
                ADD_FAILURE() << p.name << "/" << file << ": " << e.what();
            }
        }
    }
}

TEST(ProblemArchs, AnEmptyGridSkipsItsLaunchAndANegativeOneIsRefused)
{
    const kl::DeviceInfo h200 = deviceModel(9, 0, 227, 2048);
    kl::Shape s;
    s.dims = { { "N", 4096 } };
    auto plan = [](const std::string& grid) {
        // The second line's block would exceed any device: it only counts when the launch is made.
        return kl::parseKernelSpec("// @kl:param SPLIT = 1 in [1, 2]\n"
                                   "// @kl:launch k grid=(N) block=(256) args=(N)\n"
                                   "// @kl:launch r grid=("
            + grid + ") block=(4096) args=(N)\n");
    };
    EXPECT_FALSE(kl::checkDeviceLimits(plan("SPLIT > 1 ? N : 0"), { { "SPLIT", 1 } }, { s }, h200));
    const auto made = kl::checkDeviceLimits(plan("SPLIT > 1 ? N : 0"), { { "SPLIT", 2 } }, { s }, h200);
    ASSERT_TRUE(made.has_value());
    EXPECT_EQ(made->rule, "device.block-dims");
    const auto negative = kl::checkDeviceLimits(plan("0 - N"), { { "SPLIT", 1 } }, { s }, h200);
    ASSERT_TRUE(negative.has_value());
    EXPECT_EQ(negative->rule, "device.grid-dims");
    EXPECT_NE(negative->message.find("-4096 is outside 0..2147483647"), std::string::npos) << negative->message;
}

TEST(ProblemArchs, TunerPrunesClusterSizesBelowSm90AndKeepsThemOnSm90)
{
    kl::Problem softmax;
    for (auto& p : shippedProblems())
        if (p.name == "softmax")
            softmax = p;
    ASSERT_EQ(softmax.name, "softmax");
    const kl::KernelSpec spec
        = kl::parseKernelSpec(kl::test::readTextFile(problemsDir() / "softmax" / softmax.templateFile));
    const auto shapes = kl::shapesOf(softmax);

    auto valuesOf = [](const kl::tuner::SearchSpace& s, const char* param) {
        std::set<std::int64_t> values;
        for (std::size_t i = 0; i < s.size(); ++i)
            values.insert(s.config(i).at(param));
        return values;
    };
    auto clusterSizes = [&](const kl::tuner::SearchSpace& s) { return valuesOf(s, "CLUSTER"); };
    const auto hopper = kl::tuner::SearchSpace::build(spec, shapes, deviceModel(9, 0, 227, 2048));
    const auto ampere = kl::tuner::SearchSpace::build(spec, shapes, deviceModel(8, 0, 163, 2048));
    const auto ada = kl::tuner::SearchSpace::build(spec, shapes, deviceModel(8, 9, 99, 1536));

    EXPECT_EQ(clusterSizes(hopper), (std::set<std::int64_t> { 1, 2, 4, 8 }));
    EXPECT_EQ(valuesOf(hopper, "RING"), (std::set<std::int64_t> { 0, 1 }));
    EXPECT_EQ(hopper.stats().prunedByRule.count("device.arch"), 0u);
    std::size_t ringPoints = 0, ringClustered = 0;
    for (std::size_t i = 0; i < hopper.size(); ++i)
        if (hopper.config(i).at("RING") == 1) {
            ++ringPoints;
            ringClustered += hopper.config(i).at("CLUSTER") > 1;
        }
    EXPECT_EQ(ringClustered, ringPoints * 3 / 4) << "the ring splits rows over the same cluster sizes";
    for (const auto* s : { &ampere, &ada }) {
        EXPECT_EQ(clusterSizes(*s), (std::set<std::int64_t> { 1 }));
        EXPECT_EQ(valuesOf(*s, "RING"), (std::set<std::int64_t> { 0 }));
        // Every configuration that passed the constraints with CLUSTER > 1 or RING = 1 is pruned by the
        // architecture rule.
        EXPECT_EQ(s->stats().prunedByRule.at("device.arch"),
            (hopper.stats().afterConstraints - ringPoints) * 3 / 4 + ringPoints);
    }
    // CLUSTER and RING are the gated parameters: the sm_90 space is the sm_80 space times the four cluster sizes,
    // and the ring's points.
    EXPECT_EQ(hopper.size(), ampere.size() * 4 + ringPoints);
    EXPECT_GT(ampere.size(), ada.size()) << "163 KB of shared memory per block on sm_80 against 99 KB on sm_89";

    kl::ParamValues clustered = spec.defaults();
    clustered["CLUSTER"] = 8;
    const auto verdict = kl::checkDeviceLimits(spec, clustered, shapes, deviceModel(8, 6, 99, 1536));
    ASSERT_TRUE(verdict.has_value());
    EXPECT_EQ(verdict->rule, "device.arch");
    EXPECT_TRUE(verdict->blocking);
    EXPECT_NE(verdict->message.find("CLUSTER == 1 || ARCH >= 90"), std::string::npos) << verdict->message;
    EXPECT_NE(verdict->message.find("sm_86"), std::string::npos) << verdict->message;
    EXPECT_FALSE(kl::checkDeviceLimits(spec, clustered, shapes, deviceModel(9, 0, 227, 2048)));
}

TEST(ProblemArchs, MinArchRoundTripsAndABadOneNamesTheField)
{
    const kl::Json shipped = kl::Json::parse(kl::test::readTextFile(problemsDir() / "gemm_bf16" / "problem.json"));
    const kl::Problem p = kl::problemFromJson(shipped, "problem.json");
    EXPECT_EQ(p.minArch, 80);
    EXPECT_FALSE(p.supportsArch(75));
    EXPECT_TRUE(p.supportsArch(80));
    EXPECT_TRUE(p.supportsArch(120));
    EXPECT_TRUE(p.supportsArch(0)) << "an unknown architecture is not refused";
    EXPECT_EQ(p.archRefusal(75),
        "problem 'gemm_bf16' supports sm_80 and newer (problem.json \"min_arch\"); this device is sm_75");
    EXPECT_EQ(kl::problemFromJson(kl::toJson(p), "again").minArch, 80);

    kl::Json any = shipped;
    any.erase("min_arch");
    const kl::Problem q = kl::problemFromJson(any, "problem.json");
    EXPECT_EQ(q.minArch, 0);
    EXPECT_TRUE(q.supportsArch(75));
    EXPECT_FALSE(kl::toJson(q).contains("min_arch"));

    for (const kl::Json& bad : { kl::Json("ampere"), kl::Json("sm_8"), kl::Json(80) }) {
        kl::Json j = shipped;
        j["min_arch"] = bad;
        try {
            kl::problemFromJson(j, "p.json");
            ADD_FAILURE() << "accepted min_arch " << bad.dump();
        } catch (const kl::InputError& e) {
            EXPECT_NE(std::string(e.what()).find("p.json.min_arch"), std::string::npos) << e.what();
        }
    }
}

TEST(ProblemArchs, ArchIsBuiltInAndNotAParameter)
{
    try {
        kl::parseKernelSpec("// @kl:param ARCH = 90 in [80, 90]\n// @kl:launch k grid=(1) block=(32) args=(y)\n");
        ADD_FAILURE() << "a parameter named ARCH was accepted";
    } catch (const kl::InputError& e) {
        EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("built in"), std::string::npos) << e.what();
    }
}

TEST(ProblemArchs, ArchConstraintsAreCheckedPerShapeAndOnlyWhereTheArchIsKnown)
{
    const kl::KernelSpec spec = kl::parseKernelSpec("// @kl:param WIDE = 0 in [0, 1]\n"
                                                    "// @kl:constraint WIDE == 0 || ARCH >= 80 || C <= 1024\n"
                                                    "// @kl:launch k grid=(1) block=(32) args=(y)\n");
    kl::Shape small, large;
    small.dims = { { "C", 512 } };
    large.dims = { { "C", 4096 } };
    const kl::ParamValues wide = { { "WIDE", 1 } };
    kl::DeviceInfo turing;
    turing.arch = "sm_75";
    kl::DeviceInfo ampere;
    ampere.ccMajor = 8;
    ampere.ccMinor = 6;
    EXPECT_FALSE(kl::checkDeviceLimits(spec, wide, { small }, turing));
    const auto why = kl::checkDeviceLimits(spec, wide, { small, large }, turing);
    ASSERT_TRUE(why.has_value());
    EXPECT_EQ(why->rule, "device.arch");
    EXPECT_EQ(why->line, 2);
    EXPECT_EQ(
        why->message, "constraint 'WIDE == 0 || ARCH >= 80 || C <= 1024' (line 2) does not hold on sm_75 (ARCH = 75)");
    EXPECT_FALSE(kl::checkDeviceLimits(spec, wide, { small, large }, ampere));
    EXPECT_FALSE(kl::checkDeviceLimits(spec, { { "WIDE", 0 } }, { large }, turing));
    EXPECT_FALSE(kl::checkDeviceLimits(spec, wide, { large }, kl::DeviceInfo {}))
        << "a device of unknown architecture checks no ARCH constraint";
    // Without ARCH bound, the spec's own check leaves the constraint to the device limits.
    EXPECT_TRUE(spec.satisfies(wide, large.bindings()));
}

// decode_attention's tensor-core template (mma.sync bf16, ldmatrix, cp.async: sm_80+) seeds sessions on sm_80 ..
// sm_89 and on sm_120 (99 KB of shared memory, too little for the sm_90 template's ring); sm_75 keeps the portable
// template. Across its space it compiles for each architecture it serves with no spill (the O accumulators and Q
// fragments live in registers for the whole CTA) and passes the referee's rules.
TEST(DecodeAttentionTensorCores, ChosenFromSm80AndCompilesAcrossItsSpaceWithoutSpills)
{
    const kl::Problem p = kl::loadProblem((problemsDir() / "decode_attention").string());
    EXPECT_EQ(p.templateFor(75), "template.cu");
    for (const int arch : { 80, 86, 89, 120 })
        EXPECT_EQ(p.templateFor(arch), "template_sm80.cu") << arch;
    const std::string src = kl::test::readTextFile(problemsDir() / "decode_attention" / p.templateFor(80));
    const kl::KernelSpec spec = kl::parseKernelSpec(src, p);
    for (const auto& r : kl::referee::checkSource(src, p))
        ADD_FAILURE() << r.rule << " line " << r.line << ": " << r.message;
    const kl::DeviceInfo turing = deviceModel(7, 5, 64, 1024);
    const auto refused = kl::checkDeviceLimits(spec, spec.defaults(), kl::shapesOf(p), turing);
    ASSERT_TRUE(refused.has_value());
    EXPECT_EQ(refused->rule, "device.arch");

    const std::vector<kl::ParamValues> points = {
        spec.defaults(),
        { { "TILE", 32 }, { "WARPS", 1 }, { "STAGES", 6 }, { "WAVES", 8 } },
        { { "TILE", 32 }, { "WARPS", 2 }, { "STAGES", 2 }, { "WAVES", 1 } },
        { { "TILE", 128 }, { "WARPS", 4 }, { "STAGES", 3 }, { "WAVES", 4 } },
        { { "TILE", 128 }, { "WARPS", 8 }, { "STAGES", 2 }, { "WAVES", 3 } },
    };
    kl::test::expectTensorCoreModulesWithoutSpills(src, spec, p, points);
}

// The split count comes from the device's SM count, which the workspace's size cannot name: at every shape the
// harness may run and any SM count, every point's split grid stays within the workspace, the merge is launched
// only when there is more than one split, and a machine-sized batch gets one split.
TEST(DecodeAttentionTensorCores, SplitGridFitsTheWorkspaceAtEveryShapeAndSmCount)
{
    const kl::Problem p = kl::loadProblem((problemsDir() / "decode_attention").string());
    const kl::KernelSpec spec
        = kl::parseKernelSpec(kl::test::readTextFile(problemsDir() / "decode_attention" / p.templateFor(80)), p);
    ASSERT_EQ(spec.launches.size(), 2u);
    ASSERT_EQ(spec.workspaces.size(), 1u);
    std::vector<kl::Shape> shapes = kl::shapesOf(p);
    for (const auto& s : kl::heldOutShapes(p, 40, 11))
        shapes.push_back(p.withConstants(s));
    int multiSplit = 0;
    for (const auto& point : spec.enumerateSpace())
        for (const auto& shape : shapes)
            for (const std::int64_t sms : { 1, 108, 132, 148, 4096 }) {
                kl::Bindings b = kl::bindingsFor(point, shape.bindings());
                const std::int64_t B = b.at("B"), HQ = b.at("HQ"), tokens = b.at("MAXP") * b.at("PS");
                const std::int64_t workspace = spec.workspaces[0].bytes.evaluateInt(b);
                b[kl::kSmCountIdentifier] = sms;
                const std::int64_t splits = spec.launches[0].grid[0].evaluateInt(b);
                const std::string where = shape.label() + " SM_COUNT=" + std::to_string(sms);
                ASSERT_GE(splits, 1) << where;
                ASSERT_LE(splits, std::min<std::int64_t>(64, (tokens + point.at("TILE") - 1) / point.at("TILE")))
                    << where;
                ASSERT_GE(workspace, 16 + B * HQ * splits * (128 + 2) * 4) << where;
                EXPECT_EQ(spec.launches[1].grid[0].evaluateInt(b), splits > 1 ? B * HQ : 0) << where;
                multiSplit += splits > 1;
                if (2 * B * 8 > point.at("WAVES") * std::min<std::int64_t>(sms, 256)) {
                    EXPECT_EQ(splits, 1) << where;
                }
            }
    EXPECT_GT(multiSplit, 0);
    kl::Bindings b = kl::bindingsFor(spec.defaults(), p.withConstants(p.tuningShapes[1]).bindings());
    b[kl::kSmCountIdentifier] = 132;
    EXPECT_EQ(spec.launches[0].grid[0].evaluateInt(b), 2) << "B=16: 128 (sequence, KV head) pairs, 2 CTAs on 132 SMs";
}
