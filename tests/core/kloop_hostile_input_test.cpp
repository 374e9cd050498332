// The qa rows whose behaviour is a kloop command's (docs: ../shared/research/qa-newcomer-turn2.md), run against the
// real kloop binary: each hostile input gives exit 1 or 2 and a message naming the file and field, never a crash
// (exit -1 here: killed by a signal) or a silent exit 0.
#include "core/json_io.h"
#include "kl_build_features.h"
#include "session_test_util.h"
#include "tests/support/kloop_process.h"
#include "tests/support/text_file.h"

#include <algorithm>
#include <fstream>
#include <gtest/gtest.h>

using kl::clitest::ProcessResult;
using kl::clitest::runKloop;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = KL_SOURCE_DIR;

void writeText(const fs::path& p, const std::string& text)
{
    std::ofstream(p, std::ios::binary) << text;
}

std::string replaced(std::string s, const std::string& from, const std::string& to)
{
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
        s.replace(at, from.size(), to);
    return s;
}

// A copy of kernels/problems/rmsnorm under dir/name, with edit applied to its problem.json.
fs::path rmsnormCopy(const fs::path& dir, const std::string& name, const std::function<void(kl::Json&)>& edit = {})
{
    const fs::path p = dir / name;
    fs::copy(kSource / "kernels/problems/rmsnorm", p, fs::copy_options::recursive);
    if (edit) {
        kl::Json j = kl::Json::parse(kl::test::readTextFile(p / "problem.json"));
        edit(j);
        writeText(p / "problem.json", j.dump());
    }
    return p;
}

std::string nested(int depth, const std::string& inner)
{
    return std::string(static_cast<std::size_t>(depth), '(') + inner
        + std::string(static_cast<std::size_t>(depth), ')');
}

void expectRefused(const ProcessResult& r, const std::string& message, int exitCode = 1)
{
    EXPECT_EQ(r.exitCode, exitCode) << r.err.substr(0, 600);
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err.substr(0, 600);
    EXPECT_LT(r.err.size(), 2000u) << "hostile text is abbreviated, not echoed";
}

} // namespace

// qa rows 25, 51: 5000 nested parentheses in flops killed `kloop eval` and `kloop session new` (SIGSEGV).
TEST(KloopHostileInput, DeeplyNestedFlopsIsAnErrorInEvalAndSessionNew)
{
    kl::test::TempDir tmp;
    const fs::path p = rmsnormCopy(tmp.path(), "p", [](kl::Json& j) { j["flops"] = nested(5000, "T"); });
    const std::string field = "p/problem.json.flops: expression '((((";
    expectRefused(runKloop({ "eval", p.string(), "--compile-only", "--arch", "sm_90a" }, {}, tmp.path()), field);
    expectRefused(runKloop({ "session", "new", (tmp.path() / "s").string(), "--problem", p.string() }, {}, tmp.path()),
        "nested more than 256 levels deep");
    EXPECT_FALSE(fs::exists(tmp.path() / "s" / "journal.jsonl"));
}

// qa row 52: one such folder on KL_PROBLEMS_DIR killed the whole `kloop problems` listing.
TEST(KloopHostileInput, DeeplyNestedProblemIsListedAsUnreadableNextToGoodOnes)
{
    kl::test::TempDir tmp;
    rmsnormCopy(tmp.path(), "deep", [](kl::Json& j) { j["flops"] = nested(200000, "T"); });
    rmsnormCopy(tmp.path(), "good", [](kl::Json& j) { j["name"] = "good"; });
    const ProcessResult r = runKloop({ "problems" }, { { "KL_PROBLEMS_DIR", tmp.path().string() } }, tmp.path());
    EXPECT_NE(r.exitCode, -1) << r.err.substr(0, 600);
    const std::string all = r.out + r.err;
    EXPECT_NE(all.find("good"), std::string::npos) << all.substr(0, 2000);
    EXPECT_NE(all.find("deep"), std::string::npos) << all.substr(0, 2000);
    EXPECT_NE(all.find("more than the limit of 65536"), std::string::npos) << all.substr(0, 2000);
}

// qa rows 9, 37, 39: problem.json semantic holes accepted by `kloop session new` with exit 0.
TEST(KloopHostileInput, SessionNewRefusesProblemWithDuplicateDimsOrBadShapes)
{
    kl::test::TempDir tmp;
    const fs::path dup = rmsnormCopy(tmp.path(), "dup", [](kl::Json& j) { j["dims"].push_back(j["dims"][0]); });
    expectRefused(
        runKloop({ "session", "new", (tmp.path() / "s1").string(), "--problem", dup.string() }, {}, tmp.path()),
        "dup/problem.json.dims[2].name: dim 'T': a dim of that name is declared already");
    const fs::path shape = rmsnormCopy(tmp.path(), "shape", [](kl::Json& j) {
        j["tensors"][1]["shape"] = { "Z", "H/0" };
    });
    expectRefused(
        runKloop({ "session", "new", (tmp.path() / "s2").string(), "--problem", shape.string() }, {}, tmp.path()),
        "shape/problem.json.tensors[1].shape[0]: 'Z' names 'Z', which is not a dim");
}

// qa row 237: a template with the typo "MINTPR <= THREDS" ran 40 evaluations, the constraint skipped.
TEST(KloopHostileInput, SessionNewRefusesATemplateConstraintNamingAnUnknownIdentifier)
{
    kl::test::TempDir tmp;
    const fs::path p = rmsnormCopy(tmp.path(), "typo");
    const std::string source = kl::test::readTextFile(p / "template.cu");
    const auto at = source.find("MINTPR <= THREADS");
    ASSERT_NE(at, std::string::npos);
    const auto line = 1 + std::count(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    writeText(p / "template.cu", replaced(source, "MINTPR <= THREADS", "MINTPR <= THREDS"));
    expectRefused(runKloop({ "session", "new", (tmp.path() / "s").string(), "--problem", p.string() }, {}, tmp.path()),
        "typo/template.cu: line " + std::to_string(line) + ": @kl:constraint 'MINTPR <= THREDS' names 'THREDS'");
}

#if KL_FEATURE_CUDA
// qa rows 58, 69, 74, 90: `kloop eval rmsnorm CAND.cu --compile-only` compiled (exit 0) or crashed.
TEST(KloopHostileInput, EvalRefusesCandidatesWhoseAnnotationsDoNotFitTheProblem)
{
    kl::test::TempDir tmp;
    const std::string tmpl = kl::test::readTextFile(kSource / "kernels/problems/rmsnorm/template.cu");
    const std::vector<std::pair<std::string, std::string>> cases = {
        { replaced(tmpl, "VEC * CACHE <= 128", "VEC * NOPE <= 128"),
            "line 14: @kl:constraint 'VEC * NOPE <= 128' names 'NOPE'" },
        { replaced(tmpl, "grid=(ceil_div(T, THREADS /", "grid=(ceil_div(T, BOGUS) + 0 * ceil_div(T, THREADS /"),
            "names 'BOGUS'" },
        { replaced(tmpl, "args=(y, x, w, T, H, eps)", "args=(y, x)"),
            "@kl:launch passes 2 arguments to rmsnorm_template" },
        { replaced(tmpl, "grid=(", "grid=(" + std::string(5000, '(') + "1" + std::string(5000, ')') + " * "),
            "line 17: grid: expression '((((" },
        { replaced(tmpl, "VEC * CACHE <= 128", nested(5000, "VEC * CACHE <= 128")),
            "nested more than 256 levels deep" },
    };
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const fs::path cand = tmp.path() / ("cand" + std::to_string(i) + ".cu");
        writeText(cand, cases[i].first);
        const ProcessResult r
            = runKloop({ "eval", "rmsnorm", cand.string(), "--compile-only", "--arch", "sm_90a" }, {}, tmp.path());
        EXPECT_EQ(r.exitCode, 1) << i << ": " << r.out.substr(0, 600);
        EXPECT_NE((r.out + r.err).find(cases[i].second), std::string::npos)
            << i << ": " << (r.out + r.err).substr(0, 600);
    }
}

// qa rows 93, 94, 95: --params BOGUS=3, VEC=3 and CACHE=32 compiled (exit 0 or a cryptic NVRTC error).
TEST(KloopHostileInput, EvalRefusesParamsThatAreUndeclaredOrOutsideTheirValues)
{
    kl::test::TempDir tmp;
    const std::vector<std::pair<std::string, std::string>> cases = {
        { "BOGUS=3",
            "parameter 'BOGUS' is not declared (declared: THREADS, VEC, CACHE, MINTPR, MINB, PRELOAD_W, BRANCHFREE)" },
        { "VEC=3", "VEC=3 is not one of the values declared on line 8 [2, 4, 8]" },
        { "VEC=8,CACHE=32", "CACHE=32 is not one of the values declared on line 9" },
        { "THREADS=64,MINTPR=256", "constraint 'MINTPR <= THREADS' (line 13) does not hold" },
    };
    for (const auto& [params, message] : cases) {
        const ProcessResult r
            = runKloop({ "eval", "rmsnorm", "--compile-only", "--arch", "sm_90a", "--params", params }, {}, tmp.path());
        EXPECT_EQ(r.exitCode, 1) << params << ": " << r.out.substr(0, 600);
        EXPECT_NE((r.out + r.err).find(message), std::string::npos) << params << ": " << (r.out + r.err).substr(0, 600);
    }
}
#endif

// qa rows 240, 241, 242: --context 2147483647 crashed, -5 printed std::bad_alloc, abc printed "stoi".
TEST(KloopHostileInput, SessionDiffContextIsBoundedAndCheckedAsANumber)
{
    kl::test::TempDir tmp;
    const std::string demo = (kSource / "resources/demo-session").string();
    const ProcessResult small
        = runKloop({ "session", "diff", demo, "c0002", "c0016", "--context", "100000" }, {}, tmp.path());
    ASSERT_EQ(small.exitCode, 0) << small.err;
    for (const char* big : { "2147483647", "2147483646", "99999999999" }) {
        const ProcessResult r
            = runKloop({ "session", "diff", demo, "c0002", "c0016", "--context", big }, {}, tmp.path());
        EXPECT_EQ(r.exitCode, 0) << big << ": " << r.err;
        EXPECT_EQ(r.out, small.out) << big;
    }
    for (const char* bad : { "-5", "abc", "3x" })
        expectRefused(runKloop({ "session", "diff", demo, "c0002", "c0016", "--context", bad }, {}, tmp.path()),
            "--context expects a number of lines (0 or more), got '" + std::string(bad) + "'", 2);
    expectRefused(runKloop({ "session", "diff", demo, "c0002", "c0016", "--context", "" }, {}, tmp.path()),
        "--context needs a value", 2);
}

// qa row 228: a Kernel Tuner cache with THREADS=1 (not a declared value) and time "abc" was imported, exit 0.
TEST(KloopHostileInput, TuningDbImportRefusesUndeclaredValuesAndNonNumericTimes)
{
    kl::test::TempDir tmp;
    const kl::Json cache = { { "tune_params_keys", { "THREADS", "VEC", "CACHE", "MINTPR", "MINB" } },
        { "cache",
            { { "1,8,4,32,1",
                { { "THREADS", 1 }, { "VEC", 8 }, { "CACHE", 4 }, { "MINTPR", 32 }, { "MINB", 1 },
                    { "time", "abc" } } } } } };
    writeText(tmp.path() / "kt_bad.json", cache.dump());
    const fs::path db = tmp.path() / "imp.jsonl";
    expectRefused(runKloop({ "tuning-db", "import", (tmp.path() / "kt_bad.json").string(), "--problem", "rmsnorm",
                               "--device", "H200", "--db", db.string() },
                      {}, tmp.path()),
        "kt_bad.json.cache[\"1,8,4,32,1\"]: THREADS=1 is not one of the values declared on line 7");
    EXPECT_TRUE(!fs::exists(db) || fs::file_size(db) == 0) << "nothing recorded";
}

// qa rows 133, 134: `kloop export` of a session whose best candidate carries a 6000-deep or a 600000-term
// @kl:constraint crashed (SIGSEGV) although `session show` opened it.
TEST(KloopHostileInput, ExportRefusesABestCandidateWithAHostileConstraint)
{
    std::string terms;
    for (int i = 0; i < 600000; ++i)
        terms += "1+";
    for (const std::string& hostile : { nested(6000, "1"), terms + "1" }) {
        kl::test::TempDir tmp;
        const fs::path s = tmp.path() / "s";
        fs::copy(kSource / "resources/demo-session", s, fs::copy_options::recursive);
        std::istringstream lines(kl::test::readTextFile(s / "journal.jsonl"));
        std::string journal, line;
        bool edited = false;
        while (std::getline(lines, line)) {
            if (!edited && line.find("\"candidate-proposed\"") != std::string::npos
                && line.find("\"candidate\":\"c0016\"") != std::string::npos) {
                kl::Json j = kl::Json::parse(line);
                j["data"]["source"] = replaced(j["data"]["source"].get<std::string>(), "// @kl:constraint",
                    "// @kl:constraint " + hostile + " && ");
                line = j.dump();
                edited = true;
            }
            journal += line + "\n";
        }
        ASSERT_TRUE(edited);
        writeText(s / "journal.jsonl", journal);
        ASSERT_EQ(runKloop({ "session", "show", s.string() }, {}, tmp.path()).exitCode, 0);
        expectRefused(runKloop({ "export", s.string(), "--out", (tmp.path() / "b").string() }, {}, tmp.path()),
            "kloop export: the candidate's annotations: line 10: @kl:constraint: expression '");
        EXPECT_FALSE(fs::exists(tmp.path() / "b" / "manifest.json"));
    }
}
