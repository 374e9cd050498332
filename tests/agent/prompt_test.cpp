#include "agent/llm/llm_agent.h"
#include "agent/prompt/context_loader.h"
#include "agent/prompt/prompt_builder.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_store.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

namespace fs = std::filesystem;
using namespace kl;
using namespace kl::prompt;

namespace {

const fs::path kFixtures = fs::path(KL_SOURCE_DIR) / "tests" / "agent" / "fixtures";

std::string titles(const std::vector<ContextDoc>& docs)
{
    std::string s;
    for (const auto& d : docs)
        s += d.title + ";";
    return s;
}

std::string errorOf(const std::string& text)
{
    try {
        parseContextDoc(text, "hardware/x.md", "/ctx/hardware/x.md");
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

Session sessionWithHistory(const Problem& p)
{
    Session s;
    s.problemName = p.name;
    s.device.name = "NVIDIA H200";
    s.device.ccMajor = 9;
    s.device.ccMinor = 0;
    s.device.arch = "sm_90a";
    s.device.smCount = 132;
    s.device.sharedPerBlock = 48 * 1024;
    s.device.sharedPerBlockOptin = 227 * 1024;
    s.device.l2Bytes = 60ll << 20;
    Candidate root;
    root.id = "c0001";
    root.source = readFile(kFixtures / "rmsnorm_mini" / "template.cu");
    root.params = { { "BLOCK", 256 } };
    root.author = Author::Human;
    root.status = CandidateStatus::Accepted;
    s.tree.add(root);
    s.tree.setHead("c0001");
    Evaluation e;
    e.candidateId = "c0001";
    e.verdict = Verdict::Accepted;
    e.objective = 1.25;
    ShapeResult shown;
    shown.shape = p.tuningShapes[0];
    shown.correct = true;
    TimingStats t;
    t.medianUs = 41.5;
    shown.timing = t;
    t.medianUs = 51.9;
    shown.baselineTiming = t;
    shown.speedup = 1.25;
    CorrectnessStats cs;
    cs.seed = 987654321987ull;
    cs.relL2 = 0.001;
    shown.checks.push_back(cs);
    e.shapes.push_back(shown);
    ShapeResult hidden = shown;
    hidden.shape.dims = { { "T", 31337 }, { "H", 5432 } };
    hidden.heldOut = true;
    e.shapes.push_back(hidden);
    s.evaluations["c0001"] = e;

    Hypothesis h;
    h.id = "h0001";
    h.text = "Use 128-bit vector loads";
    s.hypotheses[h.id] = h;
    Candidate bad = root;
    bad.id = "c0002";
    bad.parentId = "c0001";
    bad.author = Author::Llm;
    bad.agent = "llm:openai/m";
    bad.hypothesisId = "h0001";
    bad.status = CandidateStatus::Rejected;
    s.tree.add(bad);
    Evaluation eb;
    eb.candidateId = "c0002";
    eb.verdict = Verdict::Rejected;
    eb.reasons.push_back({ "correctness.rel-l2", "rel L2 0.31 > 0.008 at T=1,H=7168", 0, true });
    // The referee may quote a held-out shape and the seed; the prompt must not.
    ShapeResult heldOutBad;
    heldOutBad.shape.dims = { { "H", 2224 }, { "T", 40009 } };
    heldOutBad.heldOut = true;
    CorrectnessStats seedStats;
    seedStats.seed = 55512345678ull;
    heldOutBad.checks.push_back(seedStats);
    eb.shapes.push_back(heldOutBad);
    eb.reasons.push_back(
        { "dynamic.held-out-shape", "wrong at H=2224,T=40009 (seed 55512345678); H=2224 T=40009 too", 0, true });
    s.evaluations["c0002"] = eb;
    Candidate tunerMiss = root;
    tunerMiss.id = "c0003";
    tunerMiss.author = Author::Tuner;
    tunerMiss.status = CandidateStatus::CompileFailed;
    s.tree.add(tunerMiss);
    return s;
}

} // namespace

TEST(ContextDocs, FrontMatterIsParsed)
{
    ContextDoc d = parseContextDoc("---\ntitle: Hopper\napplies-to:\n  archs: [sm_90, sm_90a]\n  tags: a, b\norder: 5\n"
                                   "sources: whitepaper\n---\n\n# Heading\nBody text\n",
        "hardware/hopper.md", "/x/hardware/hopper.md");
    EXPECT_EQ(d.title, "Hopper");
    EXPECT_EQ(d.section, ContextSection::Hardware);
    EXPECT_EQ(d.archs, (std::vector<std::string> { "sm_90", "sm_90a" }));
    EXPECT_EQ(d.tags, (std::vector<std::string> { "a", "b" }));
    EXPECT_EQ(d.order, 5);
    EXPECT_EQ(d.body, "# Heading\nBody text");

    ContextDoc plain = parseContextDoc("# My notes\nuse ldg\n", "mine.md", "/u/mine.md");
    EXPECT_EQ(plain.title, "My notes");
    EXPECT_EQ(plain.section, ContextSection::Notes);
    EXPECT_TRUE(plain.archs.empty());
}

TEST(ContextDocs, MalformedFrontMatterNamesFileAndLine)
{
    EXPECT_NE(errorOf("---\ntitle: x\n").find("not closed"), std::string::npos);
    EXPECT_NE(errorOf("---\ntitle: x\ncolour: red\n---\n").find("line 3"), std::string::npos);
    EXPECT_NE(errorOf("---\napplies-to:\n  archs: [hopper]\n---\n").find("'hopper'"), std::string::npos);
    EXPECT_NE(errorOf("---\n  archs: [sm_90]\n---\n").find("outside 'applies-to:'"), std::string::npos);
    EXPECT_NE(errorOf("---\napplies-to:\n  archs: [sm_90\n---\n").find("/ctx/hardware/x.md line 3"), std::string::npos);
    EXPECT_NE(errorOf("---\norder: soon\n---\n").find("integer"), std::string::npos);
}

TEST(ContextDocs, SelectionByArchitectureAndTags)
{
    const auto docs = loadContextDocs({ kFixtures / "context" });
    ASSERT_EQ(docs.size(), 6u);
    const std::vector<std::string> norm = { "normalization" };
    EXPECT_EQ(titles(selectContext(docs, 90, norm)),
        "Fixture rule;Fixture Hopper;Fixture norms;User note without front matter;");
    EXPECT_EQ(titles(selectContext(docs, 100, { "deepseek-mla" })),
        "Fixture rule;Fixture Blackwell;Fixture MLA;User note without front matter;");
    // Unknown architecture: no hardware file is guessed.
    EXPECT_EQ(titles(selectContext(docs, 0, {})), "Fixture rule;User note without front matter;");
    EXPECT_EQ(archNumber(std::string("sm_90a")), 90);
    EXPECT_EQ(archNumber(std::string("sm_120f")), 120);
    EXPECT_EQ(archNumber(std::string("compute_100a")), 100);
    EXPECT_FALSE(archNumber(std::string("hopper")).has_value());
}

TEST(ContextDocs, UserRootOverridesAndAddsFiles)
{
    const fs::path user = fs::temp_directory_path() / ("kl_ctx_user_" + std::to_string(::getpid()));
    fs::create_directories(user / "hardware");
    std::ofstream(user / "hardware" / "hopper.md")
        << "---\ntitle: Corrected Hopper\napplies-to:\n  archs: [sm_90]\n---\nfixed\n";
    std::ofstream(user / "my-kernel-tricks.md") << "# Tricks\nwarp shuffles\n";
    const auto docs = loadContextDocs({ kFixtures / "context", user, user / "missing-root" });
    const std::string t = titles(selectContext(docs, 90, {}));
    EXPECT_NE(t.find("Corrected Hopper"), std::string::npos) << t;
    EXPECT_EQ(t.find("Fixture Hopper"), std::string::npos) << t;
    EXPECT_NE(t.find("Tricks"), std::string::npos) << t;
    fs::remove_all(user);
}

TEST(ContextDocs, ShippedContextParsesAndCoversEveryArchitecture)
{
    const auto docs = loadContextDocs({ fs::path(KL_SOURCE_DIR) / "context" });
    for (int arch : { 80, 89, 90, 100, 120 }) {
        int hardware = 0;
        for (const auto& d : selectContext(docs, arch, {}))
            hardware += d.section == ContextSection::Hardware && !d.archs.empty();
        EXPECT_GE(hardware, 1) << "no hardware notes for sm_" << arch;
    }
    for (const char* tag : { "deepseek-mla", "deepseek-sparse-attention", "deepseek-v4-csa" }) {
        int models = 0;
        for (const auto& d : selectContext(docs, 90, { tag }))
            models += d.section == ContextSection::Models;
        EXPECT_GE(models, 1) << "no model notes for tag " << tag;
    }
}

TEST(PromptBuilder, StableStructureAndNoHiddenShapes)
{
    const Problem problem = loadProblem((kFixtures / "rmsnorm_mini").string());
    const Session s = sessionWithHistory(problem);
    PromptInputs in = promptInputsFor(problem, s.device, { kFixtures / "context" });
    AgentContext ctx;
    ctx.problem = &problem;
    ctx.session = &s;
    ctx.branchFrom = "c0001";
    ctx.hypothesis = s.hypotheses.at("h0001");
    ctx.bottleneckSummary = "DRAM throughput 61% of peak; long scoreboard stalls on global loads.";
    fillFromSession(in, ctx);
    in.failures = failuresFromSession(s, 6);
    const Prompt p = buildPrompt(in);

    std::vector<std::string> order;
    for (const auto& sec : p.sections)
        order.push_back(sec.title);
    const std::vector<std::string> expected = { "Role and rules", "Rules from context/rules", "Device facts",
        "Model-architecture facts", "Kernel technique and user notes", "Reply protocol", "Problem",
        "Reference implementation (trusted; it defines the semantics, it is not the baseline)", "Current candidate",
        "Profiler bottleneck summary", "Recent failed attempts (oldest first)", "Task" };
    EXPECT_EQ(order, expected);

    const std::string sys = p.system();
    const std::string user = p.user();
    EXPECT_NE(sys.find("NVIDIA H200 (sm_90a, compute capability 9.0)"), std::string::npos) << sys;
    EXPECT_NE(sys.find("227 KiB"), std::string::npos);
    EXPECT_NE(sys.find("Fixture Hopper"), std::string::npos);
    EXPECT_EQ(sys.find("Fixture Blackwell"), std::string::npos);
    EXPECT_NE(sys.find("Fixture norms"), std::string::npos);
    EXPECT_EQ(sys.find("Fixture MLA"), std::string::npos);
    EXPECT_NE(sys.find("Never special-case shapes."), std::string::npos);

    EXPECT_NE(user.find("- y: bf16 [T, H] output"), std::string::npos) << user;
    EXPECT_NE(user.find("- T in [1, 131072]"), std::string::npos);
    EXPECT_NE(user.find("- H in [64, 16384], a multiple of 8"), std::string::npos);
    EXPECT_NE(user.find("- H=4096,T=4096 (2)"), std::string::npos);
    EXPECT_NE(user.find("rmsnorm_reference"), std::string::npos);
    EXPECT_NE(user.find("41.50 us vs baseline 51.90 us"), std::string::npos);
    EXPECT_NE(user.find("Held-out shapes: 1 checked, 0 wrong."), std::string::npos);
    EXPECT_NE(user.find("DRAM throughput 61%"), std::string::npos);
    EXPECT_NE(user.find("c0002 (from c0001): rejected (tried: Use 128-bit vector loads)"), std::string::npos) << user;
    EXPECT_NE(user.find("correctness.rel-l2: rel L2 0.31"), std::string::npos);
    EXPECT_EQ(user.find("c0003"), std::string::npos); // the tuner's misses are not shown
    EXPECT_NE(user.find("> Use 128-bit vector loads"), std::string::npos);
    // Never the held-out or fixed verification shapes, never seeds.
    EXPECT_NE(user.find("dynamic.held-out-shape: wrong at <held-out shape> (seed <seed>); <held-out shape> too"),
        std::string::npos)
        << user;
    for (const auto* secret : { "31337", "5432", "77777", "987654321987", "40009", "55512345678" }) {
        EXPECT_EQ(sys.find(secret), std::string::npos) << secret;
        EXPECT_EQ(user.find(secret), std::string::npos) << secret;
    }
    // The task comes last, the protocol is in the system part.
    EXPECT_LT(user.find("# Problem"), user.find("# Task"));
    EXPECT_NE(sys.find("```kl-diff"), std::string::npos);
}

TEST(PromptBuilder, ArchitectureOnlyAndNoBase)
{
    const Problem problem = loadProblem((kFixtures / "rmsnorm_mini").string());
    DeviceInfo d;
    d.arch = "sm_100a";
    PromptInputs in = promptInputsFor(problem, d, { kFixtures / "context" });
    const Prompt p = buildPrompt(in);
    EXPECT_NE(p.system().find("Target: sm_100a, compute capability 10.0. No device is attached"), std::string::npos)
        << p.system();
    EXPECT_NE(p.system().find("Fixture Blackwell"), std::string::npos);
    EXPECT_EQ(p.system().find("```kl-diff"), std::string::npos);
    EXPECT_NE(p.user().find("No hypothesis from the engineer"), std::string::npos);
    EXPECT_EQ(p.user().find("# Current candidate"), std::string::npos);
}

TEST(PromptBuilder, EveryShippedProblemGivesACompletePromptWithoutVerifyShapes)
{
    const fs::path problems = fs::path(KL_SOURCE_DIR) / "kernels" / "problems";
    if (!fs::is_directory(problems))
        GTEST_SKIP() << "no shipped problems";
    int checked = 0;
    for (const auto& entry : fs::directory_iterator(problems)) {
        if (!fs::exists(entry.path() / "problem.json"))
            continue;
        const Problem problem = loadProblem(entry.path().string());
        for (const char* arch : { "sm_80", "sm_89", "sm_90", "sm_100", "sm_120" }) {
            DeviceInfo d;
            d.arch = arch;
            PromptInputs in = promptInputsFor(problem, d, { fs::path(KL_SOURCE_DIR) / "context" });
            AgentContext ctx;
            ctx.problem = &problem;
            fillFromSession(in, ctx);
            const Prompt p = buildPrompt(in);
            const std::string all = p.system() + p.user();
            SCOPED_TRACE(problem.name + " " + arch);
            EXPECT_NE(all.find("Problem: " + problem.name), std::string::npos);
            for (const auto& t : problem.tensors)
                EXPECT_NE(all.find("- " + t.name + ": "), std::string::npos) << t.name;
            for (const auto& dim : problem.dims)
                EXPECT_NE(all.find(dim.constant ? "- " + dim.name + " = " + std::to_string(dim.min) + " (a constant"
                                                : "- " + dim.name + " in ["),
                    std::string::npos)
                    << dim.name;
            // What an integer input means is part of the contract (a page table is a permutation).
            for (const auto& t : problem.tensors) {
                if (t.values.kind == IntValues::Kind::Permutation) {
                    EXPECT_NE(all.find(t.name + ": i32 [" + t.shape[0].text()), std::string::npos) << t.name;
                }
            }
            if (problem.name == "decode_attention") {
                EXPECT_NE(all.find("contiguous; a permutation of [0, its element count)"), std::string::npos);
                EXPECT_NE(all.find("; lengths in [(MAXP - 1) * PS + 1, MAXP * PS]"), std::string::npos);
                EXPECT_NE(all.find("- scale: f32 = 1/sqrt(D)"), std::string::npos);
            }
            // Shapes are listed as "- LABEL (weight)"; a verify label may be a prefix of a tuning one.
            for (const auto& s : problem.tuningShapes)
                EXPECT_NE(all.find("- " + s.label() + " ("), std::string::npos) << s.label();
            for (const auto& s : problem.verifyShapes) {
                bool alsoTuning = std::find(problem.tuningShapes.begin(), problem.tuningShapes.end(), s)
                    != problem.tuningShapes.end();
                if (!alsoTuning) {
                    EXPECT_EQ(all.find(s.label() + " "), std::string::npos) << s.label();
                    EXPECT_EQ(all.find(s.label() + ","), std::string::npos) << s.label();
                    EXPECT_EQ(all.find(s.label() + "\n"), std::string::npos) << s.label();
                }
            }
            EXPECT_NE(all.find("# Current candidate"), std::string::npos) << "the template is the base";
            EXPECT_NE(all.find("```kl-diff"), std::string::npos);
            EXPECT_NE(all.find("(from context/hardware/"), std::string::npos) << "no hardware notes";
            EXPECT_NE(all.find("(from context/rules/"), std::string::npos) << "no rules";
            // Each architecture gets its own hardware file and not another's.
            const bool hopper = all.find("hardware/hopper-sm90.md") != std::string::npos;
            EXPECT_EQ(hopper, std::string(arch) == "sm_90");
            const bool consumerBlackwell = all.find("hardware/blackwell-consumer-sm120.md") != std::string::npos;
            EXPECT_EQ(consumerBlackwell, std::string(arch) == "sm_120");
        }
        ++checked;
    }
    EXPECT_GE(checked, 1);
}
