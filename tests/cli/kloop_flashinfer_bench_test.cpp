// FlashInfer-Bench's trace format through the real kloop: `kloop problems import` of a Definition and its Workloads,
// `kloop run` on the imported problem against kl_test_fake_worker, and `kloop export --format flashinfer-bench`,
// with their own pydantic models writing the input and loading the output (tests/cli/flashinfer_bench_roundtrip.py,
// run by the python of scripts/flashinfer-bench-venv), for a CUDA and a Triton candidate. The bad-input tests need
// no venv.
#include "core/json_io.h"
#include "core/session_store.h"
#include "kernels/triton/triton_compiler.h"
#include "tests/support/kloop_process.h"
#include "tests/support/temp_dir.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace kl;
using namespace kl::clitest;

namespace {

std::string shellQuoted(const std::string& s)
{
    std::string q = "'";
    for (const char c : s)
        q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

struct Tool {
    int exitCode = -1;
    std::string out;
    std::string err;
};

// A helper program (the venv script, their python), stdout captured and stderr kept for the failure message.
Tool runTool(const std::vector<std::string>& argv, const fs::path& scratch)
{
    std::string cmd;
    for (const auto& a : argv)
        cmd += shellQuoted(a) + " ";
    const fs::path errFile = scratch / "tool.stderr";
    cmd += "2>" + shellQuoted(errFile.string());
    Tool t;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
        char buf[4096];
        std::size_t n = 0;
        while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
            t.out.append(buf, n);
        const int status = ::pclose(p);
        t.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    t.err = kl::test::readTextFile(errFile);
    return t;
}

struct KloopFlashInferBench : ::testing::Test {
    kl::test::TempDir tmp;
    fs::path scratch = tmp.path();

    void SetUp() override { fs::create_directories(scratch / "home"); }
    std::string tritonPython; // the pinned Triton's, for a Triton session (the cache of HOME is the scratch one)

    ProcessResult kloop(const std::vector<std::string>& args) const
    {
        return runKloop(args,
            { { "HOME", (scratch / "home").string() }, { "XDG_CACHE_HOME", (scratch / "cache").string() },
                { "XDG_CONFIG_HOME", (scratch / "config").string() }, { "KL_PROBLEMS_DIR", "" },
                { "KL_WORKER", KL_FAKE_WORKER_PATH }, { "KL_TRITON_PYTHON", tritonPython } },
            scratch);
    }
    // The round trip of issue 21: their writer -> kloop import -> a session -> kloop export -> their loaders.
    void roundTrip(const std::string& language);
    fs::path write(const std::string& name, const std::string& text) const
    {
        const fs::path p = scratch / name;
        fs::create_directories(p.parent_path());
        std::ofstream(p) << text;
        return p;
    }
};

// A definition in their JSON form, rmsnorm-shaped unless a test edits it.
Json rmsnormDefinition()
{
    return Json::parse(R"({
      "name": "rms_h2048", "op_type": "rmsnorm",
      "axes": {"batch_size": {"type": "var"}, "hidden_size": {"type": "const", "value": 2048}},
      "inputs": {"hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"},
                 "weight": {"shape": ["hidden_size"], "dtype": "bfloat16"}},
      "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"}},
      "reference": "def run(hidden_states, weight):\n    return hidden_states\n"})");
}

std::string workloadLines(const std::vector<std::pair<std::string, std::int64_t>>& batches)
{
    std::string out;
    for (const auto& [uuid, n] : batches)
        out += Json { { "definition", "rms_h2048" },
            { "workload", { { "axes", { { "batch_size", n } } }, { "inputs", Json::object() }, { "uuid", uuid } } } }
                   .dump()
            + "\n";
    return out;
}

} // namespace

void KloopFlashInferBench::roundTrip(const std::string& language)
{
    const Tool venv = runTool({ KL_SOURCE_DIR "/scripts/flashinfer-bench-venv" }, scratch);
    if (venv.exitCode != 0)
        GTEST_SKIP() << "the FlashInfer-Bench venv cannot be made (offline?): " << venv.err;
    const std::string python = venv.out.substr(0, venv.out.find('\n'));
    const std::string script = KL_SOURCE_DIR "/tests/cli/flashinfer_bench_roundtrip.py";
    const fs::path dataset = scratch / "dataset";

    const Tool written = runTool({ python, script, "write", dataset.string() }, scratch);
    ASSERT_EQ(written.exitCode, 0) << written.err;
    // Without --workloads: the TraceSet neighbour workloads/rmsnorm/rmsnorm_h4096.jsonl.
    const ProcessResult imported = kloop({ "problems", "import",
        (dataset / "definitions/rmsnorm/rmsnorm_h4096.json").string(), "--into", (scratch / "problems").string() });
    ASSERT_EQ(imported.exitCode, 0) << imported.err;
    EXPECT_NE(imported.out.find("kernels: catalogue problem rmsnorm"), std::string::npos) << imported.out;
    const fs::path problemDir = scratch / "problems/rmsnorm_h4096";
    const Problem p = loadProblem(problemDir.string());
    ASSERT_EQ(p.dims.size(), 2u);
    EXPECT_TRUE(p.dim("H")->constant);
    EXPECT_EQ(p.dim("H")->min, 4096);
    EXPECT_EQ(p.dim("T")->min, 1);
    EXPECT_EQ(p.dim("T")->max, 4096);
    ASSERT_EQ(p.tuningShapes.size(), 4u); // five workloads, two of one shape
    EXPECT_EQ(p.tuningShapes[1].dims.at("T"), 16);
    EXPECT_EQ(p.tuningShapes[1].weight, 2.0);
    EXPECT_TRUE(fs::exists(problemDir / "reference.py"));
    EXPECT_EQ(kl::test::readTextFile(problemDir / "reference.cu"),
        kl::test::readTextFile(KL_SOURCE_DIR "/kernels/problems/rmsnorm/reference.cu"));

    const fs::path session = scratch / "session";
    const ProcessResult ran = kloop({ "run", "--problem", problemDir.string(), "--agent", "tuner:random", "--session",
        session.string(), "--budget", "4", "--no-tuning-db", "--language", language });
    ASSERT_EQ(ran.exitCode, 0) << ran.out << ran.err;
    const ProcessResult exported
        = kloop({ "export", session.string(), "--format", "flashinfer-bench", "--out", dataset.string(), "--json" });
    ASSERT_EQ(exported.exitCode, 0) << exported.out << exported.err;
    const Json e = Json::parse(exported.out);

    const Tool checked
        = runTool({ python, script, "check", dataset.string(), "test double (no GPU)", language }, scratch);
    ASSERT_EQ(checked.exitCode, 0) << checked.err << checked.out;
    const Json loaded = Json::parse(checked.out);
    EXPECT_EQ(loaded["solution"], e["solution"]);
    EXPECT_EQ(loaded["solution"],
        "rmsnorm_h4096_kloop_" + SessionStore::load(session.string()).id + "_" + e["candidate"].get<std::string>());
    // Their latencies are the session's measurements of that candidate, shape by shape.
    const Session s = SessionStore::load(session.string());
    const Evaluation& ev = s.evaluations.at(e["candidate"].get<std::string>());
    ASSERT_EQ(loaded["traces"].size(), e["traces"].get<std::size_t>());
    for (const auto& t : loaded["traces"]) {
        const ShapeResult* measured = nullptr;
        for (const auto& sr : ev.shapes)
            if (sr.timing && sr.shape.dims.at("T") == t["batch_size"].get<std::int64_t>())
                measured = &sr;
        ASSERT_NE(measured, nullptr) << t.dump();
        EXPECT_DOUBLE_EQ(t["latency_ms"].get<double>(), measured->timing->medianUs / 1000.0) << t.dump();
        EXPECT_DOUBLE_EQ(t["reference_latency_ms"].get<double>(), measured->baselineTiming->medianUs / 1000.0);
        EXPECT_DOUBLE_EQ(t["speedup"].get<double>(), measured->speedup);
        EXPECT_EQ(t["status"], "PASSED");
    }
    // A second export of the same candidate replaces nothing unasked.
    const ProcessResult again
        = kloop({ "export", session.string(), "--format", "flashinfer-bench", "--out", dataset.string() });
    EXPECT_EQ(again.exitCode, 1) << again.err;
    EXPECT_NE(again.err.find("--overwrite"), std::string::npos) << again.err;
}

TEST_F(KloopFlashInferBench, RoundTripThroughTheirOwnLoaders)
{
    roundTrip("cuda");
}

TEST_F(KloopFlashInferBench, RoundTripOfATritonCandidate)
{
    std::string why;
    if (tritonVersion(&why).empty())
        GTEST_SKIP() << why;
    tritonPython = kl::tritonPython();
    roundTrip("triton");
}

TEST_F(KloopFlashInferBench, BadDefinitionsAndWorkloadsExitTwoNamingTheFileAndField)
{
    const fs::path workloads = write("w.jsonl", workloadLines({ { "a", 1 }, { "b", 64 } }));
    struct Case {
        std::string what;
        Json definition;
        std::string expected;
    };
    std::vector<Case> cases;
    Json d = rmsnormDefinition();
    d.erase("axes");
    cases.push_back({ "missing axes", d, "def.json.axes: missing" });
    d = rmsnormDefinition();
    d["inputs"]["weight"]["dtype"] = "float64";
    cases.push_back({ "unknown dtype", d, "def.json.inputs.weight.dtype: unknown dtype 'float64'" });
    d = rmsnormDefinition();
    d["inputs"]["weight"]["dtype"] = "int8";
    cases.push_back({ "dtype without a KernelLoop type", d, "def.json.inputs.weight.dtype: int8 has no KernelLoop" });
    d = rmsnormDefinition();
    d["outputs"]["output"]["shape"] = { "batch_size", "hidden" };
    cases.push_back({ "undeclared axis", d, "def.json.outputs.output.shape[1]: axis 'hidden' is not declared" });
    d = rmsnormDefinition();
    d["axes"]["hidden_size"]["type"] = "fixed";
    cases.push_back({ "bad axis type", d, "def.json.axes.hidden_size.type: expected \"const\" or \"var\"" });
    d = rmsnormDefinition();
    d["axes"]["heads"] = { { "type", "const" }, { "value", 8 } };
    cases.push_back({ "an axis no tensor uses", d, "rmsnorm: axis heads is no extent of its tensors" });
    d = rmsnormDefinition();
    d["name"] = "rms/../x";
    cases.push_back({ "unsafe name", d, "def.json.name: 'rms/../x' must be letters" });
    for (const auto& c : cases) {
        const fs::path def = write("def.json", c.definition.dump());
        const ProcessResult r = kloop({ "problems", "import", def.string(), "--workloads", workloads.string(), "--into",
            (scratch / "into").string() });
        EXPECT_EQ(r.exitCode, 2) << c.what << ": " << r.err;
        EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.what << ": " << r.err;
        EXPECT_FALSE(fs::exists(scratch / "into")) << c.what;
    }
    const fs::path def = write("def.json", rmsnormDefinition().dump());
    const std::vector<std::pair<std::string, std::string>> badWorkloads {
        { workloadLines({ { "a", 1 } }) + R"({"definition": "rms_h2048", "workload": {"axes": {}, "uuid": "b"}})",
            "w.jsonl:2.workload.axes.batch_size: missing" },
        { R"({"axes": {"batch_size": 4, "hidden_size": 2048}, "uuid": "b"})",
            "w.jsonl:1.axes.hidden_size: not a var axis" },
        { R"({"definition": "other", "workload": {"axes": {"batch_size": 4}, "uuid": "b"}})",
            "w.jsonl:1.definition: 'other' is not the definition 'rms_h2048'" },
        { R"({"axes": {"batch_size": 4}})", "w.jsonl:1.uuid: missing" },
        { "{not json", "w.jsonl:1: not valid JSON" },
        { "", "w.jsonl: no workloads" },
        // T of the catalogue rmsnorm stops at 65536: no catalogue problem holds this workload.
        { workloadLines({ { "huge", 1 << 20 } }), "rmsnorm: workload huge (H=2048,T=1048576)" },
    };
    for (const auto& [text, expected] : badWorkloads) {
        write("w.jsonl", text);
        const ProcessResult r = kloop({ "problems", "import", def.string(), "--workloads", workloads.string(), "--into",
            (scratch / "into").string() });
        EXPECT_EQ(r.exitCode, 2) << text << ": " << r.err;
        EXPECT_NE(r.err.find(expected), std::string::npos) << text << ": " << r.err;
        EXPECT_FALSE(fs::exists(scratch / "into")) << text;
    }
    // No --workloads and nothing at the TraceSet place.
    const ProcessResult none = kloop({ "problems", "import", def.string() });
    EXPECT_EQ(none.exitCode, 2) << none.err;
    EXPECT_NE(none.err.find("definition rms_h2048 needs its workloads"), std::string::npos) << none.err;
}

// No catalogue problem is a row scaling with a scalar input: the error says what to pass, and --reference imports it
// under the definition's own names.
TEST_F(KloopFlashInferBench, ADefinitionNoProblemMatchesNeedsAReferenceKernel)
{
    const fs::path def = write("scale.json", R"({
      "name": "scale_rows", "op_type": "scale",
      "axes": {"rows": {"type": "var"}, "cols": {"type": "const", "value": 64}},
      "inputs": {"x": {"shape": ["rows", "cols"], "dtype": "float32"}, "alpha": {"shape": null, "dtype": "float32"}},
      "outputs": {"y": {"shape": ["rows", "cols"], "dtype": "float32"}},
      "reference": "def run(x, alpha):\n    return x * alpha\n"})");
    const fs::path workloads = write("scale.jsonl",
        R"({"axes": {"rows": 8}, "inputs": {"alpha": {"type": "scalar", "value": 0.5}}, "uuid": "s8"}
{"axes": {"rows": 512}, "inputs": {"alpha": {"value": 0.5}}, "uuid": "s512"}
)");
    const std::string into = (scratch / "into").string();
    const ProcessResult unmatched
        = kloop({ "problems", "import", def.string(), "--workloads", workloads.string(), "--into", into });
    EXPECT_EQ(unmatched.exitCode, 2) << unmatched.err;
    EXPECT_NE(unmatched.err.find("scale.json: definition scale_rows (op_type scale) matches no catalogue problem"),
        std::string::npos)
        << unmatched.err;
    EXPECT_NE(unmatched.err.find("rmsnorm: "), std::string::npos) << unmatched.err; // why each one did not
    EXPECT_NE(unmatched.err.find("pass --reference FILE.cu"), std::string::npos) << unmatched.err;

    const fs::path wrongKernel = write("wrong.cu",
        "// @kl:launch scale_reference grid=(rows) block=(64) smem=0 args=(y, z, rows, cols, alpha)\n"
        "extern \"C\" __global__ void scale_reference(float* y, const float* z, int rows, int cols, float alpha) {}\n");
    const ProcessResult wrong = kloop({ "problems", "import", def.string(), "--workloads", workloads.string(), "--into",
        into, "--reference", wrongKernel.string() });
    EXPECT_EQ(wrong.exitCode, 2) << wrong.err;
    EXPECT_NE(wrong.err.find("wrong.cu: "), std::string::npos) << wrong.err;
    EXPECT_FALSE(fs::exists(into));

    const fs::path kernel = write("scale.cu",
        "// @kl:launch scale_reference grid=(rows) block=(64) smem=0 args=(y, x, rows, cols, alpha)\n"
        "extern \"C\" __global__ void scale_reference(float* y, const float* x, int rows, int cols, float alpha)\n"
        "{\n    y[blockIdx.x * cols + threadIdx.x] = alpha * x[blockIdx.x * cols + threadIdx.x];\n}\n");
    const ProcessResult ok = kloop({ "problems", "import", def.string(), "--workloads", workloads.string(), "--into",
        into, "--reference", kernel.string(), "--json" });
    ASSERT_EQ(ok.exitCode, 0) << ok.err;
    EXPECT_EQ(Json::parse(ok.out)["reference_from"], kernel.string());
    const Problem p = loadProblem(into + "/scale_rows");
    EXPECT_EQ(p.dim("rows")->min, 8);
    EXPECT_EQ(p.dim("rows")->max, 512);
    EXPECT_TRUE(p.dim("cols")->constant);
    ASSERT_NE(p.scalar("alpha"), nullptr);
    EXPECT_EQ(p.scalar("alpha")->value, 0.5);
    ASSERT_NE(p.tensor("x"), nullptr);
    EXPECT_EQ(p.tensor("y")->role, TensorRole::Output);
    EXPECT_EQ(p.bytes.text(), "4*(rows)*(cols) + 4*(rows)*(cols)");

    // One value per scalar: workloads that disagree are refused.
    write("scale.jsonl", R"({"axes": {"rows": 8}, "inputs": {"alpha": {"type": "scalar", "value": 0.5}}, "uuid": "a"}
{"axes": {"rows": 16}, "inputs": {"alpha": {"type": "scalar", "value": 2}}, "uuid": "b"}
)");
    const ProcessResult differ = kloop({ "problems", "import", def.string(), "--workloads", workloads.string(),
        "--into", (scratch / "other").string(), "--reference", kernel.string() });
    EXPECT_EQ(differ.exitCode, 2) << differ.err;
    EXPECT_NE(differ.err.find("scale.jsonl:2.inputs.alpha.value: differs"), std::string::npos) << differ.err;
}

// A scalar input pairs with the catalogue problem's scalar of that name and takes the workloads' value.
TEST_F(KloopFlashInferBench, AScalarInputTakesTheWorkloadsValue)
{
    Json d = rmsnormDefinition();
    d["inputs"]["eps"] = { { "shape", nullptr }, { "dtype", "float32" } };
    const fs::path def = write("def.json", d.dump());
    const fs::path workloads = write("w.jsonl",
        R"({"axes": {"batch_size": 8}, "inputs": {"eps": {"type": "scalar", "value": 1e-5}}, "uuid": "a"}
{"axes": {"batch_size": 64}, "inputs": {"eps": {"type": "scalar", "value": 1e-5}}, "uuid": "b"}
)");
    const ProcessResult r
        = kloop({ "problems", "import", def.string(), "--workloads", workloads.string(), "--into", scratch.string() });
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const Problem p = loadProblem((scratch / "rms_h2048").string());
    ASSERT_NE(p.scalar("eps"), nullptr);
    EXPECT_EQ(p.scalar("eps")->value, 1e-5);
    EXPECT_EQ(p.dim("H")->min, 2048);
    EXPECT_EQ(p.tuningShapes.size(), 2u);
}

// A problem that was not imported is written under its own names: the problem's name, its dims as the axes.
TEST_F(KloopFlashInferBench, ACatalogueProblemExportsUnderItsOwnNames)
{
    const fs::path session = scratch / "s";
    const ProcessResult ran = kloop({ "run", "--problem", "rmsnorm", "--agent", "tuner:random", "--session",
        session.string(), "--budget", "4", "--no-tuning-db" });
    ASSERT_EQ(ran.exitCode, 0) << ran.out << ran.err;
    const ProcessResult exported = kloop(
        { "export", session.string(), "--format", "flashinfer-bench", "--out", (scratch / "out").string(), "--json" });
    ASSERT_EQ(exported.exitCode, 0) << exported.out << exported.err;
    const Json e = Json::parse(exported.out);
    EXPECT_EQ(e["definition_file"], "");
    EXPECT_NE(e["solution_file"].get<std::string>().find("/solutions/kloop/rmsnorm/"), std::string::npos);
    const Json solution = Json::parse(kl::test::readTextFile(e["solution_file"].get<std::string>()));
    EXPECT_EQ(solution["definition"], "rmsnorm");
    EXPECT_EQ(solution["spec"]["language"], "cuda");
    std::istringstream lines(kl::test::readTextFile(e["traces_file"].get<std::string>()));
    std::string line;
    std::size_t n = 0;
    while (std::getline(lines, line)) {
        const Json t = Json::parse(line);
        EXPECT_EQ(t["definition"], "rmsnorm");
        EXPECT_TRUE(t["workload"]["axes"].contains("T") && t["workload"]["axes"].contains("H")) << line;
        EXPECT_EQ(t["workload"]["uuid"].get<std::string>().rfind("kloop-", 0), 0u) << line;
        EXPECT_EQ(t["workload"]["inputs"], Json::parse(R"({"x": {"type": "random"}, "w": {"type": "random"}})"));
        ++n;
    }
    EXPECT_EQ(n, e["traces"].get<std::size_t>());
    EXPECT_GT(n, 0u);
}

// The bundle export's refusal rule: a candidate that was never measured is not written as a solution.
TEST_F(KloopFlashInferBench, ExportRefusesWhatTheBundleExportRefuses)
{
    const fs::path session = scratch / "s";
    const ProcessResult created = kloop({ "session", "new", session.string(), "--problem", "rmsnorm", "--json" });
    ASSERT_EQ(created.exitCode, 0) << created.err;
    const Session s = SessionStore::load(session.string());
    const std::string child = s.tree.order().back();
    const ProcessResult r = kloop({ "export", session.string(), "--candidate", child, "--format", "flashinfer-bench",
        "--out", (scratch / "out").string() });
    EXPECT_EQ(r.exitCode, 1) << r.err;
    EXPECT_NE(
        r.err.find("refusing to export candidate " + child + " as a FlashInfer-Bench solution"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("not-evaluated"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(scratch / "out"));
    const ProcessResult format
        = kloop({ "export", session.string(), "--format", "onnx", "--out", (scratch / "out").string() });
    EXPECT_EQ(format.exitCode, 2) << format.err;
    EXPECT_NE(format.err.find("--format is bundle or flashinfer-bench, got 'onnx'"), std::string::npos) << format.err;
    const ProcessResult forced = kloop(
        { "export", session.string(), "--format", "flashinfer-bench", "--force", "--out", (scratch / "out").string() });
    EXPECT_EQ(forced.exitCode, 2) << forced.err;
}
