// Triton candidates: the language marker and the Triton form of the @kl annotations, the Triton static rules,
// Triton's AOT compile to CUBIN + PTX for sm_90a without a GPU (through NvrtcCompiler's pool and cache), the PTX
// rules on Triton's PTX, and kloop run / eval with Triton candidates against kl_test_fake_worker.
#include "agent/prompt/reply_parser.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/session_store.h"
#include "kernels/nvrtc_compiler.h"
#include "kernels/referee/referee.h"
#include "kernels/triton/triton_compiler.h"
#include "kernels/worker_protocol.h"

#ifdef KLOOP_PATH
#include "tests/support/kloop_process.h"
#include "tests/support/text_file.h"
#endif

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <sstream>

namespace fs = std::filesystem;
using namespace kl;

namespace {

fs::path problemDir(const std::string& name)
{
    return fs::path(KL_SOURCE_DIR) / "kernels" / "problems" / name;
}

Problem problemNamed(const std::string& name)
{
    return loadProblem(problemDir(name).string());
}

std::string tritonTemplate(const std::string& problem)
{
    return kl::test::readTextFile(problemDir(problem) / "template_triton.py");
}

std::string replaced(std::string s, const std::string& from, const std::string& to)
{
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << "missing: " << from;
    if (at != std::string::npos)
        s.replace(at, from.size(), to);
    return s;
}

bool hasRule(const std::vector<VerdictReason>& rs, const std::string& id)
{
    return std::any_of(rs.begin(), rs.end(), [&](const VerdictReason& r) { return r.rule == id; });
}

std::string joinedReasons(const std::vector<VerdictReason>& rs)
{
    std::string s;
    for (const auto& r : rs)
        s += r.rule + " (line " + std::to_string(r.line) + "): " + r.message + "\n";
    return s;
}

// A minimal honest Triton rmsnorm, for edits that make cheats of it.
const char* kSmallRmsnorm = R"(import triton
import triton.language as tl

# @kl:param BLOCK = 8192 in [8192, 16384]
# @kl:launch rms grid=(T) num_warps=8 num_stages=1 args=(y, x, w, T, H, eps)


@triton.jit
def rms(y, x, w, T, H, eps, BLOCK: tl.constexpr):
    """Rows of at most BLOCK."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < H
    v = tl.load(x + row * H + cols, mask=m, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(v * v, axis=0) / H + eps)
    g = tl.load(w + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y + row * H + cols, (v * inv * g).to(y.dtype.element_ty), mask=m)
)";

// ---- language and annotations -------------------------------------------------------------------------------

TEST(TritonLanguage, DetectedByTheJitDecoratorAtALineStartOnly)
{
    EXPECT_EQ(detectLanguage(tritonTemplate("rmsnorm")), KernelLanguage::Triton);
    EXPECT_EQ(detectLanguage(tritonTemplate("softmax")), KernelLanguage::Triton);
    EXPECT_EQ(detectLanguage(kl::test::readTextFile(problemDir("rmsnorm") / "template.cu")), KernelLanguage::Cuda);
    EXPECT_EQ(detectLanguage("// mentions @triton.jit in prose\n__global__ void k() {}\n"), KernelLanguage::Cuda);
    EXPECT_EQ(detectLanguage("@triton.jitter\ndef k(): pass\n"), KernelLanguage::Cuda);
    EXPECT_EQ(languageFromName("triton"), KernelLanguage::Triton);
    EXPECT_EQ(languageFromName("cuda"), KernelLanguage::Cuda);
    EXPECT_FALSE(languageFromName("python"));
    EXPECT_EQ(languageOfFileName("x/cand.py"), KernelLanguage::Triton);
    EXPECT_EQ(languageOfFileName("cand.cu"), KernelLanguage::Cuda);
    EXPECT_FALSE(languageOfFileName("cand.txt"));
}

TEST(TritonLanguage, WrongLanguageIsAnErrorNamingTheFile)
{
    try {
        requireLanguage(
            kl::test::readTextFile(problemDir("rmsnorm") / "template.cu"), KernelLanguage::Triton, "runs/k.py");
        FAIL() << "a CUDA source declared Triton was accepted";
    } catch (const InputError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("runs/k.py"), std::string::npos) << m;
        EXPECT_NE(m.find("declared triton"), std::string::npos) << m;
        EXPECT_NE(m.find("--language cuda"), std::string::npos) << m;
    }
    EXPECT_THROW(requireLanguage(kSmallRmsnorm, KernelLanguage::Cuda, "k.cu"), InputError);
    EXPECT_NO_THROW(requireLanguage(kSmallRmsnorm, KernelLanguage::Triton, "k.py"));
}

TEST(TritonSpec, TemplatesParseWithBlockFromNumWarps)
{
    for (const char* name : { "rmsnorm", "softmax" }) {
        const Problem p = problemNamed(name);
        const KernelSpec spec = parseKernelSpec(tritonTemplate(name), p);
        EXPECT_EQ(spec.language, KernelLanguage::Triton);
        ASSERT_EQ(spec.launches.size(), 1u);
        ASSERT_TRUE(spec.param("BLOCK") && spec.param("WARPS") && spec.param("STAGES")) << name;
        const Bindings b = bindingsFor(spec.defaults(), {});
        const auto& l = spec.launches[0];
        EXPECT_EQ(l.block[0].evaluateInt(b), 32 * spec.param("WARPS")->defaultValue) << name;
        EXPECT_EQ(l.block[1].evaluateInt(b), 1);
        EXPECT_EQ(l.sharedBytes.evaluateInt(b), 0);
        EXPECT_EQ(l.numStages.evaluateInt(b), spec.param("STAGES")->defaultValue);
        EXPECT_GT(spec.enumerateSpace().size(), 20u) << name << ": the tuner has a space to search";
    }
}

TEST(TritonSpec, LaunchLineErrorsNameTheLine)
{
    const Problem p = problemNamed("rmsnorm");
    const std::string launch = "# @kl:launch rms grid=(T) num_warps=8 num_stages=1 args=(y, x, w, T, H, eps)";
    const auto error = [&](const std::string& newLaunch) {
        try {
            parseKernelSpec(replaced(kSmallRmsnorm, launch, newLaunch), p);
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(error("# @kl:launch rms grid=(T) block=(256) args=(y, x, w, T, H, eps)")
                  .find("line 5: a Triton @kl:launch takes no block="),
        std::string::npos);
    EXPECT_NE(error("# @kl:launch rms grid=(T) num_warps=T args=(y, x, w, T, H, eps)")
                  .find("names 'T', which is not a parameter"),
        std::string::npos);
    EXPECT_NE(
        error("# @kl:launch rms grid=(T) num_warps=3 args=(y, x, w, T, H, eps)").find("power of 2"), std::string::npos);
    EXPECT_NE(error(launch + "\n" + launch).find("line 6: a Triton candidate launches one"), std::string::npos);
    // Without num_warps/num_stages Triton's defaults (4, 3) hold.
    const KernelSpec spec
        = parseKernelSpec(replaced(kSmallRmsnorm, launch, "# @kl:launch rms grid=(T) args=(y, x, w, T, H, eps)"), p);
    EXPECT_EQ(spec.launches[0].block[0].evaluateInt(bindingsFor(spec.defaults(), {})), 128);
    // CUDA annotations stay in // comments, and a CUDA launch refuses Triton keys.
    EXPECT_THROW(parseKernelSpec("// @kl:launch k grid=(T) block=(32) num_warps=4 args=(y)\n"), InputError);
    EXPECT_THROW(parseKernelSpec(replaced(kSmallRmsnorm, "# @kl:launch", "// @kl:launch")), InputError)
        << "a Triton source's // lines are not annotations";
}

TEST(TritonSpec, TritonTemplateIsSelectableAndMissingOneIsNamed)
{
    Problem p = problemNamed("rmsnorm");
    useTemplateFor(p, KernelLanguage::Triton);
    EXPECT_EQ(p.templateFile, "template_triton.py");
    Problem g = problemNamed("gemm_bf16");
    try {
        useTemplateFor(g, KernelLanguage::Triton);
        FAIL();
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("problem.json) has no \"triton_template\""), std::string::npos)
            << e.what();
    }
    EXPECT_NO_THROW(useTemplateFor(g, KernelLanguage::Cuda));
    // Round trip through the session store's JSON keeps the field.
    EXPECT_EQ(problemFromJson(toJson(problemNamed("softmax")), "t").tritonTemplateFile, "template_triton.py");
}

TEST(TritonSpec, AbiCrossesTheWire)
{
    const std::map<std::string, KernelAbi> abi = { { "rms", { 2048, 2 } } };
    const auto back = wire::kernelAbi(wire::toJson(abi));
    ASSERT_EQ(back.count("rms"), 1u);
    EXPECT_EQ(back.at("rms").dynamicSharedBytes, 2048);
    EXPECT_EQ(back.at("rms").trailingNullPointers, 2);
    EXPECT_THROW(wire::kernelAbi(nlohmann::json::parse(R"({"rms": {"shared": -1, "null_pointers": 0}})")), InputError);
}

TEST(TritonReply, ACandidateBlockInTritonParsesAndTheProtocolSaysHow)
{
    const auto reply = prompt::parseReply(
        std::string("NOTE: one row per program\n```kl-candidate\n") + kSmallRmsnorm + "```\n", nullptr);
    EXPECT_EQ(reply.spec.language, KernelLanguage::Triton);
    EXPECT_EQ(reply.source, kSmallRmsnorm);
    const std::string text = prompt::replyProtocolText(true, KernelLanguage::Triton);
    EXPECT_NE(text.find("# @kl:launch my_kernel grid=(T) num_warps=WARPS"), std::string::npos);
    EXPECT_NE(text.find("+++ b/candidate.py"), std::string::npos);
    EXPECT_EQ(prompt::replyProtocolText(true).find("@triton.jit"), std::string::npos) << "CUDA keeps its protocol";
}

// ---- the session store ---------------------------------------------------------------------------------------

TEST(TritonSession, ATritonCandidateIsStoredAsSourcePyAndOldSessionsStillLoad)
{
    const fs::path dir = fs::temp_directory_path() / ("kl-triton-store-" + std::to_string(std::random_device {}()));
    Session header;
    header.id = "s-store";
    header.problemName = "rmsnorm";
    const std::string cuda = kl::test::readTextFile(problemDir("rmsnorm") / "template.cu");
    {
        auto store = SessionStore::create(dir, header);
        Candidate t;
        t.source = kSmallRmsnorm;
        store->proposeCandidate(t);
        Candidate c;
        c.source = cuda;
        store->proposeCandidate(c);
    }
    const fs::path triton = dir / "candidates" / "c0001";
    EXPECT_EQ(kl::test::readTextFile(triton / "source.py"), kSmallRmsnorm);
    EXPECT_FALSE(fs::exists(triton / "source.cu"));
    EXPECT_TRUE(fs::exists(dir / "candidates" / "c0002" / "source.cu"));
    EXPECT_FALSE(fs::exists(dir / "candidates" / "c0002" / "source.py"));
    // A session written before Triton sources were named .py: its folder holds source.cu; the journal is the truth.
    fs::rename(triton / "source.py", triton / "source.cu");
    const Session loaded = SessionStore::load(dir);
    EXPECT_EQ(loaded.tree.at("c0001").source, kSmallRmsnorm);
    EXPECT_EQ(loaded.tree.at("c0002").source, cuda);
    EXPECT_EQ(candidateSourceFileName(kSmallRmsnorm), "source.py");
    EXPECT_EQ(candidateSourceFileName(cuda), "source.cu");
    fs::remove_all(dir);
}

// ---- static rules ---------------------------------------------------------------------------------------------

TEST(TritonRules, HonestTemplatesAndCorpusRaiseNothing)
{
    for (const char* name : { "rmsnorm", "softmax" }) {
        const auto rs = referee::checkSource(tritonTemplate(name), problemNamed(name));
        EXPECT_TRUE(rs.empty()) << name << ":\n" << joinedReasons(rs);
    }
    const std::string withComments = replaced(kSmallRmsnorm, "    row = tl.program_id(0).to(tl.int64)",
        "    # print(x); import torch; if H == 4096: return -- prose, not code\n"
        "    row = tl.program_id(0).to(tl.int64)  # tl.device_print('t', x) is not called");
    const auto rs = referee::checkSource(withComments, problemNamed("rmsnorm"));
    EXPECT_TRUE(rs.empty()) << joinedReasons(rs);
}

struct TritonCheat {
    const char* name;
    const char* from;
    const char* to;
    const char* rule;
    int line; // of the reason; 0: not checked
};

class TritonRulesCatch : public ::testing::TestWithParam<TritonCheat> { };

TEST_P(TritonRulesCatch, EachCheatItsRule)
{
    const TritonCheat& c = GetParam();
    const std::string source = replaced(kSmallRmsnorm, c.from, c.to);
    const auto rs = referee::checkSource(source, problemNamed("rmsnorm"));
    ASSERT_TRUE(hasRule(rs, c.rule)) << c.name << ": got\n" << joinedReasons(rs);
    if (c.line) {
        for (const auto& r : rs)
            if (r.rule == c.rule) {
                EXPECT_EQ(r.line, c.line) << c.name << ": " << r.message;
            }
    }
}

const char* kRow = "    row = tl.program_id(0).to(tl.int64)";

INSTANTIATE_TEST_SUITE_P(Cheats, TritonRulesCatch,
    ::testing::Values(
        TritonCheat { "import_os", "import triton\n", "import triton\nimport os\n", referee::rule::Include, 2 },
        TritonCheat {
            "from_torch", "import triton\n", "import triton\nfrom torch import empty\n", referee::rule::Include, 2 },
        TritonCheat {
            "module_cache", "\n\n@triton.jit", "\nCACHE = {}\n\n@triton.jit", referee::rule::MutableGlobal, 7 },
        TritonCheat { "global_stmt", kRow, "    global seen\n    row = tl.program_id(0).to(tl.int64)",
            referee::rule::MutableGlobal, 0 },
        TritonCheat { "autotune", "@triton.jit", "@triton.autotune(configs=[], key=['H'])\n@triton.jit",
            referee::rule::HostCode, 0 },
        TritonCheat { "host_def", "\n\n@triton.jit", "\ndef launch(y):\n    return y\n\n@triton.jit",
            referee::rule::HostCode, 0 },
        TritonCheat { "host_statement", "\n\n@triton.jit", "\nprint('hi')\n\n@triton.jit", referee::rule::Printf, 0 },
        TritonCheat { "torch_in_kernel", kRow, "    row = torch.cuda.current_stream()", referee::rule::HostCode, 0 },
        TritonCheat { "device_print", kRow, "    row = tl.program_id(0).to(tl.int64)\n    tl.device_print('r', row)",
            referee::rule::Printf, 0 },
        TritonCheat { "device_assert", kRow, "    row = tl.program_id(0).to(tl.int64)\n    tl.device_assert(row >= 0)",
            referee::rule::EarlyExit, 0 },
        TritonCheat { "globaltimer", kRow, "    row = tl.extra.cuda.globaltimer() % T", referee::rule::TimerRead, 0 },
        TritonCheat { "inline_timer", kRow,
            "    row = tl.inline_asm_elementwise('mov.u64 $0, %globaltimer;', '=l', [], dtype=tl.int64, "
            "is_pure=False, pack=1)",
            referee::rule::TimerRead, 0 },
        TritonCheat { "exact_shape", "    m = cols < H", "    if H == 8192:\n        return\n    m = cols < H",
            referee::rule::ShapeSpecialCase, 0 },
        TritonCheat { "exact_shape_param_name", "    m = cols < H",
            "    if 4096 != H:\n        return\n    m = cols < H", referee::rule::ShapeSpecialCase, 0 },
        TritonCheat { "fp8_math", "v = tl.load(x + row * H + cols, mask=m, other=0.0).to(tl.float32)",
            "v = tl.load(x + row * H + cols, mask=m, other=0.0).to(tl.float8e4nv).to(tl.float32)",
            referee::rule::LowerPrecision, 0 },
        TritonCheat { "fp16_math", "(v * inv * g)", "(v.to(tl.float16) * inv * g)", referee::rule::LowerPrecision, 0 }),
    [](const ::testing::TestParamInfo<TritonCheat>& i) { return std::string(i.param.name); });

// ---- AOT compile (needs the pinned Triton, installed by scripts/install-deps) ---------------------------------

class TritonCompile : public ::testing::Test {
protected:
    void SetUp() override
    {
        std::string why;
        if (tritonVersion(&why).empty())
            GTEST_SKIP() << why;
        cache = fs::temp_directory_path() / ("kl-triton-cache-" + std::to_string(std::random_device {}()));
    }
    void TearDown() override
    {
        std::error_code ec;
        fs::remove_all(cache, ec);
    }

    CompileJob jobFor(const std::string& source, const Problem& p, ParamValues params = {})
    {
        const KernelSpec spec = parseKernelSpec(source, p);
        CompileJob job;
        job.source = source;
        job.params = spec.defaults();
        for (const auto& [k, v] : params)
            job.params[k] = v;
        job.arch = "sm_90a";
        job.kernels = { spec.launches[0].kernel };
        prepareTritonJob(job, spec, p);
        return job;
    }

    fs::path cache;
};

TEST_F(TritonCompile, TemplatesToCubinAndPtxForSm90aWithoutAGpu)
{
    for (const char* name : { "rmsnorm", "softmax" }) {
        const Problem p = problemNamed(name);
        NvrtcCompiler compiler(cache, 1);
        const CompileJob job = jobFor(tritonTemplate(name), p);
        EXPECT_EQ(job.argTypes.front(), p.name == "rmsnorm" ? "*bf16" : "*fp16");
        // Pointers are 16-byte aligned; H and C are multiples of 8 (problem.json), T and R of nothing.
        EXPECT_EQ(job.argDivisibility,
            p.name == "rmsnorm" ? std::vector<int>({ 16, 16, 16, 0, 8, 0 }) : std::vector<int>({ 16, 16, 0, 8 }));
        const auto m = compiler.compile(job);
        ASSERT_TRUE(m->report.ok) << name << ": " << m->report.log;
        EXPECT_EQ(m->cubin.substr(0, 4),
            std::string("\x7f"
                        "ELF",
                4))
            << "a CUBIN is an ELF image";
        EXPECT_NE(m->ptx.find(".target sm_90a"), std::string::npos);
        EXPECT_NE(m->ptx.find("ld.global.v4.b32"), std::string::npos) << "the alignment facts let loads vectorize";
        const std::string kernel = job.kernels.front();
        EXPECT_EQ(m->loweredNames.at(kernel), kernel);
        EXPECT_NE(m->ptx.find(".entry " + kernel + "("), std::string::npos);
        EXPECT_NE(m->ptx.find(".reqntid " + std::to_string(32 * job.numWarps)), std::string::npos)
            << "the block the launch plan derives from num_warps is the one Triton compiled for";
        ASSERT_EQ(m->abi.count(kernel), 1u);
        EXPECT_EQ(m->abi.at(kernel).trailingNullPointers, 2) << "Triton 3.6 appends global and profile scratch";
        EXPECT_GE(m->abi.at(kernel).dynamicSharedBytes, 0);
        EXPECT_NE(m->report.log.find("Triton 3.6"), std::string::npos) << m->report.log;
        // The PTX rules judge Triton's PTX as any candidate's: an honest kernel raises nothing.
        const auto rs = referee::checkPtx(m->ptx, p, "candidate.py");
        EXPECT_TRUE(rs.empty()) << name << ":\n" << joinedReasons(rs);
        // The cache: the same job again is a hit (memory, then a fresh compiler from disk); the key names Triton.
        EXPECT_TRUE(compiler.compile(job)->report.cacheHit);
        NvrtcCompiler again(cache, 1);
        const auto fromDisk = again.compile(job);
        EXPECT_TRUE(fromDisk->report.cacheHit);
        EXPECT_EQ(fromDisk->cubin, m->cubin);
        EXPECT_EQ(fromDisk->abi.at(kernel).trailingNullPointers, 2);
        EXPECT_EQ(again.compiles(), 0u);
        CompileJob other = job;
        other.numWarps = job.numWarps == 4 ? 8 : 4;
        EXPECT_NE(compiler.cacheKey(other), compiler.cacheKey(job));
    }
}

TEST_F(TritonCompile, CompileErrorsCarryTritonsMessage)
{
    const Problem p = problemNamed("rmsnorm");
    NvrtcCompiler compiler({}, 1);
    const auto bad = compiler.compile(jobFor(replaced(kSmallRmsnorm, "tl.rsqrt(", "tl.no_such_function("), p));
    EXPECT_FALSE(bad->report.ok);
    EXPECT_NE(bad->report.log.find("Triton 3.6"), std::string::npos) << bad->report.log;
    EXPECT_NE(bad->report.log.find("no_such_function"), std::string::npos) << bad->report.log;
    EXPECT_TRUE(bad->cubin.empty());
    // The arguments the launch line passes must be the kernel's non-constexpr parameters.
    const std::string fewer = replaced(kSmallRmsnorm, "def rms(y, x, w, T, H, eps,", "def rms(y, x, w, T, H,");
    const auto mismatch = compiler.compile(jobFor(fewer, p));
    EXPECT_FALSE(mismatch->report.ok);
    EXPECT_NE(
        mismatch->report.log.find("passes 6 arguments to rms, whose non-constexpr parameters are 5"), std::string::npos)
        << mismatch->report.log;
}

TEST_F(TritonCompile, HelperRunsNoCandidateCodeBeyondImportsAndDefs)
{
    // With the static rules off (kloop eval --compile-only has them; the pool does not), the helper itself refuses
    // a module that would execute anything on the compiling machine.
    const Problem p = problemNamed("rmsnorm");
    NvrtcCompiler compiler({}, 1);
    const fs::path marker = cache.string() + "-ran";
    const std::string evil = replaced(
        kSmallRmsnorm, "import triton\n", "import triton\nopen('" + marker.string() + "', 'w').write('x')\n");
    const auto m = compiler.compile(jobFor(evil, p));
    EXPECT_FALSE(m->report.ok);
    EXPECT_NE(m->report.log.find("line 2: Expr at module level"), std::string::npos) << m->report.log;
    EXPECT_FALSE(fs::exists(marker)) << "the candidate's module-level code ran";
    const std::string defaultCall
        = replaced(kSmallRmsnorm, "BLOCK: tl.constexpr)", "BLOCK: tl.constexpr = open('" + marker.string() + "'))");
    EXPECT_NE(compiler.compile(jobFor(defaultCall, p, { { "BLOCK", 8192 } }))->report.log.find("is not a literal"),
        std::string::npos);
    EXPECT_FALSE(fs::exists(marker));
}

TEST_F(TritonCompile, PtxRulesCatchWhatTheSourceRulesMiss)
{
    // A timer read spelled so the token rules cannot see it (the register name split across a concatenation):
    // the compiled PTX still reads %globaltimer.
    const Problem p = problemNamed("rmsnorm");
    const std::string hidden = replaced(kSmallRmsnorm, kRow,
        "    t = tl.inline_asm_elementwise('mov.u64 $0, %global' + 'timer;', '=l', [], dtype=tl.int64, is_pure=False, "
        "pack=1)\n    row = tl.program_id(0).to(tl.int64) + (t & 0)");
    EXPECT_FALSE(hasRule(referee::checkSource(hidden, p), referee::rule::TimerRead));
    NvrtcCompiler compiler({}, 1);
    const auto m = compiler.compile(jobFor(hidden, p));
    ASSERT_TRUE(m->report.ok) << m->report.log;
    const auto rs = referee::checkPtx(m->ptx, p, "candidate.py");
    EXPECT_TRUE(hasRule(rs, referee::rule::PtxSpecialRegister)) << joinedReasons(rs);
}

// ---- kloop with Triton candidates through the worker test double ---------------------------------------------

#ifdef KLOOP_PATH
class TritonKloop : public TritonCompile {
protected:
    void SetUp() override
    {
        TritonCompile::SetUp();
        if (IsSkipped())
            return;
        scratch = fs::temp_directory_path() / ("kl-triton-kloop-" + std::to_string(std::random_device {}()));
        fs::create_directories(scratch);
    }
    void TearDown() override
    {
        std::error_code ec;
        fs::remove_all(scratch, ec);
        TritonCompile::TearDown();
    }
    std::map<std::string, std::string> env() const
    {
        // HOME moves into the scratch directory, so the Triton interpreter found here is named explicitly.
        return { { "KL_WORKER", KL_FAKE_WORKER_PATH }, { "HOME", (scratch / "home").string() },
            { "KL_CACHE_DIR", (scratch / "cache").string() }, { "KL_PROBLEMS_DIR", "" },
            { "KL_TRITON_PYTHON", tritonPython() } };
    }
    clitest::ProcessResult kloop(const std::vector<std::string>& args) const
    {
        return clitest::runKloop(args, env(), scratch);
    }
    fs::path scratch;
};

TEST_F(TritonKloop, RunTunesTheTritonTemplate)
{
    const fs::path session = scratch / "runs" / "rms";
    const auto r = kloop({ "run", "--problem", "rmsnorm", "--language", "triton", "--agent", "tuner:random", "--budget",
        "4", "--no-tuning-db", "--session", session.string() });
    ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
    const Session s = SessionStore::load(session);
    EXPECT_EQ(s.settings.extra.at("language"), "triton");
    int tritonEvaluated = 0;
    for (const auto& id : s.tree.order()) {
        const Candidate& c = s.tree.at(id);
        if (detectLanguage(c.source) != KernelLanguage::Triton)
            continue;
        EXPECT_EQ(c.source, tritonTemplate("rmsnorm"));
        const auto e = s.evaluations.find(id);
        if (e == s.evaluations.end())
            continue;
        ++tritonEvaluated;
        EXPECT_TRUE(e->second.compile.ok) << id << ": " << e->second.compile.log;
        EXPECT_TRUE(e->second.correctEverywhere()) << id;
    }
    EXPECT_GE(tritonEvaluated, 3) << "the template and the tuner's Triton configurations were compiled and judged";
    // The session's folder and its diff name a Triton source .py, a CUDA one .cu.
    std::string tritonId, cudaId;
    for (const auto& id : s.tree.order())
        (detectLanguage(s.tree.at(id).source) == KernelLanguage::Triton ? tritonId : cudaId) = id;
    ASSERT_FALSE(tritonId.empty() || cudaId.empty()) << "the CUDA baseline and the Triton template are seeded";
    EXPECT_TRUE(fs::exists(session / "candidates" / tritonId / "source.py"));
    const auto diff = kloop({ "session", "diff", session.string(), cudaId, tritonId });
    ASSERT_EQ(diff.exitCode, 0) << diff.err;
    EXPECT_NE(diff.out.find("--- " + cudaId + "/source.cu\n+++ " + tritonId + "/source.py\n"), std::string::npos)
        << diff.out.substr(0, 300);

    const auto cuda = kloop({ "run", "--problem", "gemm_bf16", "--language", "triton", "--agent", "tuner:random",
        "--budget", "1", "--session", (scratch / "runs" / "g").string() });
    EXPECT_NE(cuda.exitCode, 0);
    EXPECT_NE(cuda.err.find("has no \"triton_template\""), std::string::npos) << cuda.err;
}

TEST_F(TritonKloop, PromptAsksForTritonWithItsTemplateAndContext)
{
    const auto triton = kloop({ "prompt", "--problem", "rmsnorm", "--language", "triton", "--arch", "sm_90a" });
    ASSERT_EQ(triton.exitCode, 0) << triton.err;
    EXPECT_NE(triton.out.find("You are a Triton kernel engineer"), std::string::npos);
    EXPECT_NE(triton.out.find("Writing Triton candidates for KernelLoop"), std::string::npos) << "context page";
    EXPECT_NE(triton.out.find("```python\n" + tritonTemplate("rmsnorm")), std::string::npos) << "the Triton template";
    EXPECT_NE(triton.out.find("num_warps=EXPR num_stages=EXPR"), std::string::npos) << "the Triton protocol";
    const auto cuda = kloop({ "prompt", "--problem", "rmsnorm", "--arch", "sm_90a" });
    ASSERT_EQ(cuda.exitCode, 0) << cuda.err;
    EXPECT_NE(cuda.out.find("You are a CUDA kernel engineer"), std::string::npos);
    EXPECT_EQ(cuda.out.find("Writing Triton candidates"), std::string::npos);
    const auto bad = kloop({ "prompt", "--problem", "rmsnorm", "--language", "rust" });
    EXPECT_NE(bad.exitCode, 0);
    EXPECT_NE(bad.err.find("--language must be cuda or triton, got 'rust'"), std::string::npos) << bad.err;
}

TEST_F(TritonKloop, EvalJudgesTritonFilesAndRefusesTheWrongLanguage)
{
    const fs::path honest = scratch / "rms.py";
    std::ofstream(honest) << kSmallRmsnorm;
    const auto ok = kloop({ "eval", "rmsnorm", honest.string(), "--json" });
    EXPECT_EQ(ok.exitCode, 0) << ok.err << ok.out;
    EXPECT_NE(ok.out.find("\"correct\""), std::string::npos) << ok.out;

    const fs::path cheat = scratch / "cheat.py";
    std::ofstream(cheat) << replaced(kSmallRmsnorm, "\n\n@triton.jit", "\nSEEN = {}\n\n@triton.jit");
    const auto rejected = kloop({ "eval", "rmsnorm", cheat.string(), "--json" });
    EXPECT_EQ(rejected.exitCode, 1);
    EXPECT_NE(rejected.out.find("static.mutable-global"), std::string::npos) << rejected.out << rejected.err;

    const fs::path mislabeled = scratch / "cuda.cu";
    std::ofstream(mislabeled) << kSmallRmsnorm;
    const auto wrong = kloop({ "eval", "rmsnorm", mislabeled.string() });
    EXPECT_NE(wrong.exitCode, 0);
    EXPECT_NE(wrong.err.find(mislabeled.string() + ": declared cuda but the source is Triton"), std::string::npos)
        << wrong.err;
}
#endif

} // namespace
