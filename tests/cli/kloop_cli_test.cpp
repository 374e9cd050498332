// kloop's command line as a user meets it, through the real binary: options every command rejects, races between
// two kloop processes on one session, and the messages that tell a user what to do next.
#include "core/current_best.h"
#include "core/errors.h"
#include "core/events.h"
#include "core/json_io.h"
#include "core/session_store.h"
#include "tests/support/kloop_process.h"

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace kl;
using namespace kl::clitest;

namespace {

struct KloopCli : ::testing::Test {
    fs::path scratch;

    void SetUp() override
    {
        scratch = fs::temp_directory_path()
            / ("kl_kloop_cli_" + std::to_string(::getpid()) + "_"
                + ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(scratch);
        fs::create_directories(scratch / "home");
    }
    void TearDown() override
    {
        if (!HasFailure() && !std::getenv("KL_TEST_KEEP"))
            fs::remove_all(scratch);
    }
    std::map<std::string, std::string> environment() const
    {
        return { { "HOME", (scratch / "home").string() }, { "XDG_CACHE_HOME", (scratch / "cache").string() },
            { "XDG_CONFIG_HOME", (scratch / "config").string() }, { "KL_PROBLEMS_DIR", "" },
            { "KL_WORKER", KL_FAKE_WORKER_PATH }, { "OPENAI_API_KEY", "sk-test" } };
    }
    ProcessResult kloop(const std::vector<std::string>& args) const { return runKloop(args, environment(), scratch); }
};

// The command paths `kloop --help` lists.
std::vector<std::string> listedCommands(const std::string& help)
{
    std::vector<std::string> out;
    std::istringstream lines(help);
    std::string line;
    bool inList = false;
    while (std::getline(lines, line)) {
        if (line == "Commands:") {
            inList = true;
            continue;
        }
        if (!inList || line.rfind("  ", 0) != 0)
            continue;
        const std::string rest = line.substr(2);
        out.push_back(rest.substr(0, rest.find("  ")));
    }
    return out;
}

std::vector<std::string> words(const std::string& path)
{
    std::vector<std::string> w;
    std::istringstream s(path);
    for (std::string x; s >> x;)
        w.push_back(x);
    return w;
}

} // namespace

// Issue 14 and QA rows 101, 197: a typo such as --budjet must not run with the default budget.
TEST_F(KloopCli, EveryCommandRejectsUnknownOptionsAndMissingValuesWithExitTwo)
{
    const ProcessResult help = kloop({ "--help" });
    ASSERT_EQ(help.exitCode, 0) << help.err;
    const std::vector<std::string> commands = listedCommands(help.out);
    // One option that takes a value, per command that has one.
    const std::map<std::string, std::string> valueOption { { "eval", "arch" }, { "export", "out" }, { "problems", "" },
        { "problems import", "workloads" }, { "pipeline export", "stage" }, { "pipeline run", "out" },
        { "pipeline show", "" }, { "pipeline validate", "" }, { "profile", "out" }, { "profile sol", "out" },
        { "prompt", "problem" }, { "run", "budget" }, { "session diff", "context" }, { "session list", "" },
        { "session new", "problem" }, { "session regimes", "min-gain" }, { "session review", "note" },
        { "session show", "" }, { "trace analyze", "work" }, { "trace export", "out" }, { "trace info", "" },
        { "tuning-db export", "space" }, { "tuning-db import", "problem" }, { "tuning-db list", "db" },
        { "version", "" } };
    ASSERT_GE(commands.size(), 18u) << help.out;
    for (const std::string& c : commands) {
        ASSERT_TRUE(valueOption.count(c)) << "a new command '" << c << "': add it to this test";
        std::vector<std::string> args = words(c);
        args.insert(args.end(), { "--frobnicate", "3" });
        const ProcessResult r = kloop(args);
        EXPECT_EQ(r.exitCode, 2) << c << ": " << r.out << r.err;
        EXPECT_NE(r.err.find("unknown option --frobnicate"), std::string::npos) << c << ": " << r.err;
        EXPECT_NE(r.err.find("kloop " + c + ":"), std::string::npos) << r.err;
        if (valueOption.at(c).empty())
            continue;
        std::vector<std::string> missing = words(c);
        missing.push_back("--" + valueOption.at(c));
        const ProcessResult m = kloop(missing);
        EXPECT_EQ(m.exitCode, 2) << c << ": " << m.out << m.err;
        EXPECT_NE(m.err.find("--" + valueOption.at(c) + " needs a value"), std::string::npos) << c << ": " << m.err;
    }
    // A value option followed by another option has no value (it used to swallow "--json").
    const ProcessResult swallowed = kloop({ "session", "new", (scratch / "s").string(), "--problem", "--json" });
    EXPECT_EQ(swallowed.exitCode, 2) << swallowed.err;
    EXPECT_NE(swallowed.err.find("--problem needs a value"), std::string::npos) << swallowed.err;
    EXPECT_FALSE(fs::exists(scratch / "s"));
    // The typo of the issue: nothing is created.
    const ProcessResult typo
        = kloop({ "session", "new", (scratch / "t").string(), "--problem", "rmsnorm", "--bogus", "3" });
    EXPECT_EQ(typo.exitCode, 2);
    EXPECT_FALSE(fs::exists(scratch / "t"));
}

// QA row 185: NaN passed the "< 0" check.
TEST_F(KloopCli, RunRejectsNonFiniteAndNegativeNumbersBeforeAnythingRuns)
{
    for (const std::string minutes : { "nan", "inf", "-1", "2x", "" }) {
        const ProcessResult r = kloop({ "run", "--problem", "rmsnorm", "--agent", "tuner:random", "--session",
            (scratch / "s").string(), "--minutes=" + minutes });
        EXPECT_EQ(r.exitCode, 2) << minutes << ": " << r.err;
        EXPECT_NE(r.err.find("--minutes"), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(scratch / "s" / "journal.jsonl")) << minutes;
    }
    const ProcessResult budget = kloop({ "run", "--problem", "rmsnorm", "--agent", "tuner:random", "--session",
        (scratch / "s").string(), "--budget", "5e3" });
    EXPECT_EQ(budget.exitCode, 2) << budget.err;
    EXPECT_NE(budget.err.find("--budget takes a whole number, got '5e3'"), std::string::npos) << budget.err;
    // QA rows 182, 183, 184, 196: too large, fractional, trailing garbage, a negative seed read as 2^64-1.
    for (const auto& [option, value] : std::vector<std::pair<std::string, std::string>> {
             { "budget", "99999999999" }, { "budget", "2.5" }, { "budget", "10abc" }, { "seed", "-1" } }) {
        const ProcessResult r = kloop({ "run", "--problem", "rmsnorm", "--agent", "tuner:random", "--session",
            (scratch / "s").string(), "--" + option, value });
        EXPECT_EQ(r.exitCode, 2) << option << " " << value << ": " << r.err;
        EXPECT_NE(r.err.find("--" + option), std::string::npos) << r.err;
        EXPECT_NE(r.err.find(value), std::string::npos) << r.err;
    }
    // QA row 177.
    const ProcessResult speedup
        = kloop({ "export", (scratch / "none").string(), "--out", (scratch / "b").string(), "--min-speedup", "-5" });
    EXPECT_EQ(speedup.exitCode, 2) << speedup.err;
    EXPECT_NE(speedup.err.find("--min-speedup must be in 0.."), std::string::npos) << speedup.err;
}

// QA rows 107, 219, 142: a file where a directory belongs (and the reverse) is named as such.
TEST_F(KloopCli, AFileWhereADirectoryBelongsIsNamedAsSuch)
{
    std::ofstream(scratch / "existing.json") << "{}";
    const ProcessResult show = kloop({ "session", "show", (scratch / "existing.json").string() });
    EXPECT_EQ(show.exitCode, 1);
    EXPECT_NE(show.err.find("existing.json is a file; a session is a directory"), std::string::npos) << show.err;
    const ProcessResult created
        = kloop({ "session", "new", (scratch / "existing.json").string(), "--problem", "rmsnorm" });
    EXPECT_EQ(created.exitCode, 1);
    EXPECT_NE(created.err.find("existing.json is a file"), std::string::npos) << created.err;
    EXPECT_EQ(created.err.find("not empty"), std::string::npos) << created.err;
    const ProcessResult trace = kloop({ "trace", "analyze", scratch.string() });
    EXPECT_EQ(trace.exitCode, 1);
    EXPECT_NE(trace.err.find("is a directory, not a trace file"), std::string::npos) << trace.err;
}

// QA row 139: `kloop run --resume` on a session with a torn journal tail cut the tail before finding no GPU.
TEST_F(KloopCli, AResumeThatCannotStartLeavesTheSessionUntouched)
{
    const fs::path dir = scratch / "torn";
    ASSERT_EQ(kloop({ "session", "new", dir.string(), "--problem", "rmsnorm", "--agent", "tuner:random" }).exitCode, 0);
    {
        std::ofstream(dir / "journal.jsonl", std::ios::app) << R"({"seq":99,"kind":"no)";
    }
    const std::string before = kl::test::readTextFile(dir / "journal.jsonl");
    auto env = environment();
    env["KL_WORKER"] = (scratch / "no-such-worker").string();
    const ProcessResult r = runKloop({ "run", "--resume", dir.string(), "--budget", "3" }, env, scratch);
    EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("no usable CUDA GPU"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("torn"), std::string::npos) << "the torn tail is reported: " << r.err;
    const std::string after = kl::test::readTextFile(dir / "journal.jsonl");
    EXPECT_TRUE(after == before) << "a run that could not start changed the journal: " << before.size() << " -> "
                                 << after.size() << " bytes";
}

// QA row 244: two `kloop session new` on one directory both succeeded and left a journal no command could load.
TEST_F(KloopCli, TwoConcurrentSessionNewOnOneDirectoryExactlyOneSucceedsAndTheJournalLoads)
{
    for (int trial = 0; trial < 12; ++trial) {
        const fs::path dir = scratch / ("s" + std::to_string(trial));
        fs::create_directories(scratch / "a");
        fs::create_directories(scratch / "b");
        KloopProcess first({ "session", "new", dir.string(), "--problem", "rmsnorm" }, environment(), scratch / "a");
        KloopProcess second({ "session", "new", dir.string(), "--problem", "rmsnorm" }, environment(), scratch / "b");
        const ProcessResult r1 = first.wait();
        const ProcessResult r2 = second.wait();
        ASSERT_NE(r1.exitCode, -1) << r1.err;
        ASSERT_NE(r2.exitCode, -1) << r2.err;
        EXPECT_EQ((r1.exitCode == 0) + (r2.exitCode == 0), 1) << "trial " << trial << ":\n"
                                                              << r1.out << r1.err << "\n---\n"
                                                              << r2.out << r2.err;
        const ProcessResult& loser = r1.exitCode == 0 ? r2 : r1;
        EXPECT_EQ(loser.exitCode, 1) << loser.err;
        EXPECT_TRUE(loser.err.find("another process") != std::string::npos
            || loser.err.find("already exists") != std::string::npos)
            << loser.err;
        std::vector<Event> events;
        ASSERT_NO_THROW(SessionStore::load(dir, nullptr, &events)) << "trial " << trial;
        int created = 0;
        for (const auto& e : events)
            created += e.kind == EventKind::SessionCreated;
        EXPECT_EQ(created, 1);
        EXPECT_EQ(kloop({ "session", "show", dir.string() }).exitCode, 0);
    }
}

// The same race without process start-up in between (which on a loaded machine often serialises the two): two
// creators released at once on one directory.
TEST_F(KloopCli, TwoSessionStoreCreatorsReleasedAtOnceExactlyOneSucceeds)
{
    for (int trial = 0; trial < 40; ++trial) {
        const fs::path dir = scratch / ("t" + std::to_string(trial));
        Session header;
        header.id = "race";
        header.problemName = "rmsnorm";
        std::atomic<int> ready { 0 };
        std::atomic<int> created { 0 };
        std::vector<std::string> errors(2);
        std::vector<std::thread> creators;
        for (int i = 0; i < 2; ++i)
            creators.emplace_back([&, i] {
                ready.fetch_add(1);
                while (ready.load() < 2) { }
                try {
                    // Done at once, as `kloop session new` is: the lock is released while the other may still be
                    // on its way to it.
                    SessionStore::create(dir, header).reset();
                    created.fetch_add(1);
                } catch (const InputError& e) {
                    errors[static_cast<std::size_t>(i)] = e.what();
                }
            });
        for (auto& t : creators)
            t.join();
        EXPECT_EQ(created.load(), 1) << "trial " << trial << ": " << errors[0] << " | " << errors[1];
        std::vector<Event> events;
        ASSERT_NO_THROW(SessionStore::load(dir, nullptr, &events)) << "trial " << trial;
        EXPECT_EQ(events.size(), 1u);
    }
}

// Issue 23, Messages; QA Part 1 friction 3 and 4, row 61.
TEST_F(KloopCli, SessionNewSaysHowToRunItAndResumeNamesTheAgentToPass)
{
    const fs::path dir = scratch / "rms";
    const ProcessResult created = kloop({ "session", "new", dir.string(), "--problem", "rmsnorm" });
    ASSERT_EQ(created.exitCode, 0) << created.err;
    EXPECT_NE(created.out.find("next: kloop run --resume " + dir.string() + " --agent tuner:bayes"), std::string::npos)
        << created.out;
    const ProcessResult resumed = kloop({ "run", "--resume", dir.string() });
    EXPECT_EQ(resumed.exitCode, 2) << resumed.err;
    EXPECT_EQ(resumed.err.find("unknown agent ''"), std::string::npos) << resumed.err;
    EXPECT_NE(resumed.err.find("--agent tuner:bayes"), std::string::npos) << resumed.err;
    // Following the hint runs the session (the worker test double stands in for the GPU).
    const ProcessResult run
        = kloop({ "run", "--resume", dir.string(), "--agent", "tuner:random", "--budget", "3", "--no-tuning-db" });
    EXPECT_EQ(run.exitCode, 0) << run.out << run.err;
    // A first run is not a resume (QA Part 1: "resuming: 2 unfinished candidates" on a fresh session).
    EXPECT_NE(run.out.find("evaluating the 2 candidates the session starts with"), std::string::npos) << run.out;
    EXPECT_EQ(run.out.find("resuming:"), std::string::npos) << run.out;

    const ProcessResult created2
        = kloop({ "session", "new", (scratch / "llm").string(), "--problem", "rmsnorm", "--agent", "tuner:bayes" });
    ASSERT_EQ(created2.exitCode, 0) << created2.err;
    EXPECT_NE(created2.out.find("next: kloop run --resume " + (scratch / "llm").string() + "   "), std::string::npos)
        << created2.out;
}

TEST_F(KloopCli, ADirectoryGivenAsTheCandidateFileIsNamedAsSuch)
{
    fs::create_directories(scratch / "x.cu");
    const ProcessResult r
        = kloop({ "eval", "rmsnorm", (scratch / "x.cu").string(), "--compile-only", "--arch", "sm_90a" });
    EXPECT_EQ(r.exitCode, 1) << r.err;
    EXPECT_NE(r.err.find("x.cu is a directory"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("@kl:launch"), std::string::npos) << r.err;
}

TEST_F(KloopCli, VersionAndGroupHelpWork)
{
    const ProcessResult v = kloop({ "--version" });
    EXPECT_EQ(v.exitCode, 0) << v.err;
    EXPECT_EQ(v.out, kloop({ "version" }).out);
    for (const std::string group : { "session", "trace", "tuning-db" }) {
        const ProcessResult h = kloop({ group, "--help" });
        EXPECT_EQ(h.exitCode, 0) << group << ": " << h.err;
        EXPECT_NE(h.out.find("  " + group + " "), std::string::npos) << h.out;
        EXPECT_EQ(kloop({ "help", group }).exitCode, 0);
    }
    EXPECT_NE(kloop({ "session", "--help" }).out.find("session new"), std::string::npos);
    const ProcessResult nope = kloop({ "help", "nope" });
    EXPECT_EQ(nope.exitCode, 2);
    EXPECT_NE(nope.err.find("unknown command 'nope'"), std::string::npos) << nope.err;
}

// QA Part 1 "progress output": carriage returns in a CI log, and "error:" instead of the command's name.
TEST_F(KloopCli, TraceProgressToAFileIsPlainLinesAndErrorsNameTheCommand)
{
    const fs::path trace = fs::path(KL_SOURCE_DIR) / "resources" / "demo-session" / "traces";
    fs::path file;
    for (const auto& e : fs::directory_iterator(trace))
        if (e.path().string().find(".json.gz") != std::string::npos)
            file = e.path();
    ASSERT_FALSE(file.empty());
    const ProcessResult r = kloop({ "trace", "analyze", file.string() });
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_NE(r.err.find("% "), std::string::npos) << "progress is still reported: " << r.err;
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
    std::ofstream(scratch / "garbage.json") << "{ not a trace";
    for (const std::string cmd : { "analyze", "info" }) {
        const ProcessResult bad = kloop({ "trace", cmd, (scratch / "garbage.json").string() });
        EXPECT_EQ(bad.exitCode, 1) << bad.err;
        EXPECT_NE(bad.err.find("kloop trace " + cmd + ": "), std::string::npos) << bad.err;
        EXPECT_EQ(bad.err.find("error: "), std::string::npos) << bad.err;
    }
}

// QA Part 1: `tuning-db export --space rmsnorm` wanted the hash prefix, not the problem name `list` shows with it.
TEST_F(KloopCli, TuningDbExportTakesTheProblemNameThatListShows)
{
    const fs::path db = scratch / "tuning.jsonl";
    std::ofstream(scratch / "kt.json") << R"({"tune_params_keys": ["THREADS", "VEC", "CACHE", "MINTPR", "MINB"],
        "cache": {"256,8,4,32,1": {"THREADS": 256, "VEC": 8, "CACHE": 4, "MINTPR": 32, "MINB": 1, "time": 0.012},
                  "512,8,4,32,1": {"THREADS": 512, "VEC": 8, "CACHE": 4, "MINTPR": 32, "MINB": 1, "time": 0.010}}})";
    const ProcessResult imported = kloop({ "tuning-db", "import", (scratch / "kt.json").string(), "--problem",
        "rmsnorm", "--device", "H200", "--db", db.string() });
    ASSERT_EQ(imported.exitCode, 0) << imported.out << imported.err;
    const ProcessResult exported = kloop(
        { "tuning-db", "export", "--space", "rmsnorm", "--out", (scratch / "out.json").string(), "--db", db.string() });
    ASSERT_EQ(exported.exitCode, 0) << exported.err;
    EXPECT_NE(exported.out.find("wrote 2 configurations"), std::string::npos) << exported.out;
    const ProcessResult unknown = kloop(
        { "tuning-db", "export", "--space", "softmax", "--out", (scratch / "x.json").string(), "--db", db.string() });
    EXPECT_EQ(unknown.exitCode, 1);
    EXPECT_NE(unknown.err.find("no recorded space starts with 'softmax'"), std::string::npos) << unknown.err;
}

// QA rows 240-242: --context was read with stoi (a raw "stoi" for abc, bad_alloc for -5, a crash for INT_MAX).
TEST_F(KloopCli, SessionDiffContextIsABoundedWholeNumber)
{
    const std::string demo = (fs::path(KL_SOURCE_DIR) / "resources" / "demo-session").string();
    for (const std::string value : { "-5", "abc", "1.5" }) {
        const ProcessResult r = kloop({ "session", "diff", demo, "c0002", "c0016", "--context", value });
        EXPECT_EQ(r.exitCode, 2) << value << ": " << r.err;
        EXPECT_NE(r.err.find("--context"), std::string::npos) << r.err;
    }
    // More context than the text has shows all of it (row 240 crashed here).
    EXPECT_EQ(kloop({ "session", "diff", demo, "c0002", "c0016", "--context", "2147483647" }).exitCode, 0);
    EXPECT_EQ(kloop({ "session", "diff", demo, "c0002", "c0016", "--context", "5" }).exitCode, 0);
}

// QA row 245: a `session new` killed before its first event left a folder that every command refused, and that a new
// `session new` called not empty: only rm -rf helped. Nothing was recorded in it, so a new create takes it over.
TEST_F(KloopCli, ASessionNewKilledBeforeItsFirstEventCanBeRunAgain)
{
    const fs::path dir = scratch / "interrupted";
    fs::create_directories(dir / "candidates");
    std::ofstream(dir / "journal.jsonl").flush();
    std::ofstream(dir / "session.json") << "{\"schema_ver";
    const ProcessResult r = kloop({ "session", "new", dir.string(), "--problem", "rmsnorm" });
    EXPECT_EQ(r.exitCode, 0) << r.err;
    EXPECT_EQ(kloop({ "session", "show", dir.string() }).exitCode, 0);
    // Anything else in the folder is someone's: still refused, and left alone.
    const fs::path other = scratch / "other";
    fs::create_directories(other / "candidates");
    std::ofstream(other / "journal.jsonl").flush();
    std::ofstream(other / "notes.txt") << "mine";
    const ProcessResult refused = kloop({ "session", "new", other.string(), "--problem", "rmsnorm" });
    EXPECT_EQ(refused.exitCode, 1);
    EXPECT_NE(refused.err.find("not empty"), std::string::npos) << refused.err;
    EXPECT_EQ(kl::test::readTextFile(other / "notes.txt"), "mine");
    EXPECT_FALSE(fs::exists(other / "session.json"));
}

// QA row 232: an unreadable tuning database stopped every run without saying how to get past it.
TEST_F(KloopCli, AnUnreadableTuningDatabaseSaysHowToRunWithoutIt)
{
    std::ofstream(scratch / "bad.jsonl") << "this is not json\n";
    const ProcessResult r = kloop({ "run", "--problem", "rmsnorm", "--agent", "tuner:random", "--session",
        (scratch / "s").string(), "--budget", "2", "--tuning-db", (scratch / "bad.jsonl").string() });
    EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("bad.jsonl"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--no-tuning-db"), std::string::npos) << r.err;
}

// A session from a profile: the recorded H200 Llama trace seeds rmsnorm's tuning shapes with the model's shapes
// weighted by their time, the run (worker test double) measures them, and `trace analyze --session` projects the
// best candidate's speedups onto the trace (Amdahl, per shape).
TEST_F(KloopCli, SessionFromTraceTunesTheModelsShapesAndProjectsTheGain)
{
    const std::string trace = std::string(KL_SOURCE_DIR) + "/resources/traces/h200-llama-decode.pt.trace.json.gz";
    const fs::path dir = scratch / "from-trace";
    const ProcessResult made
        = kloop({ "session", "new", dir.string(), "--problem", "rmsnorm", "--from-trace", trace, "--json" });
    ASSERT_EQ(made.exitCode, 0) << made.err;
    const Json created = Json::parse(made.out);
    ASSERT_EQ(created.at("tuning_shapes").size(), 2u);
    EXPECT_EQ(created.at("tuning_shapes")[0].at("dims"), Json({ { "T", 1 }, { "H", 4096 } }));
    EXPECT_GT(created.at("tuning_shapes")[0].at("weight").get<double>(), 0.8);
    EXPECT_TRUE(fs::exists(dir / "problem" / "reference.cu"));

    const ProcessResult run
        = kloop({ "run", "--resume", dir.string(), "--agent", "tuner:random", "--budget", "6", "--no-tuning-db" });
    ASSERT_EQ(run.exitCode, 0) << run.err;
    const Session s = SessionStore::load(dir);
    // Timed at the model's shapes; held-out checks still draw from the whole validity range.
    bool heldOutElsewhere = false;
    std::set<std::string> timed;
    for (const auto& [id, e] : s.evaluations)
        for (const auto& shape : e.shapes) {
            heldOutElsewhere |= shape.heldOut && shape.shape.dims.at("H") != 4096;
            if (!shape.heldOut && shape.timing)
                timed.insert(shape.shape.label());
        }
    EXPECT_TRUE(heldOutElsewhere);
    EXPECT_TRUE(timed.count("H=4096,T=1") && timed.count("H=4096,T=512"));

    const ProcessResult analyzed = kloop({ "trace", "analyze", trace, "--json", "--session", dir.string() });
    ASSERT_EQ(analyzed.exitCode, 0) << analyzed.err;
    const Json j = Json::parse(analyzed.out);
    const Json& p = j.at("projection");
    EXPECT_EQ(p.at("problem"), "rmsnorm");
    const std::string best = p.at("candidate");
    ASSERT_TRUE(s.evaluations.count(best)) << best;
    double saved = 0;
    for (const auto& ps : p.at("shapes")) {
        EXPECT_TRUE(ps.at("measured").get<bool>());
        double speedup = 0;
        for (const auto& r : s.evaluations.at(best).shapes)
            if (!r.heldOut && Json(r.shape.dims) == ps.at("dims"))
                speedup = r.speedup;
        EXPECT_NEAR(ps.at("speedup").get<double>(), speedup, 1e-9);
        saved += ps.at("gpu_ns").get<double>() * (1 - 1 / speedup);
    }
    EXPECT_NEAR(p.at("saved_ns").get<double>(), saved, 2.0);
    EXPECT_GT(p.at("saved_ns").get<double>(), 0);
    EXPECT_LE(p.at("end_to_end_pct").get<double>(), p.at("upper_bound_pct").get<double>());
    ASSERT_TRUE(j.at("workload").at("tunable").is_array());

    const ProcessResult refused
        = kloop({ "session", "new", (scratch / "softmax").string(), "--problem", "softmax", "--from-trace", trace });
    EXPECT_EQ(refused.exitCode, 1) << refused.err;
    EXPECT_NE(refused.err.find("no operation of the trace fits problem softmax"), std::string::npos) << refused.err;
    EXPECT_FALSE(fs::exists(scratch / "softmax" / "journal.jsonl"));
}

// Shape regimes (issue 20) against the worker's test double: `kloop run` on rmsnorm (decode T <= 256, prefill
// otherwise) keeps a best per regime, draws held-out shapes inside each regime and times two of each against the
// baseline; `kloop session show` prints the regimes with their winners; `kloop export` writes the regime dispatcher.
TEST_F(KloopCli, RegimesRunKeepsABestPerRegimeShowsThemAndExportsTheDispatcher)
{
    const fs::path dir = scratch / "s";
    const ProcessResult run = kloop({ "run", "--problem", "rmsnorm", "--agent", "tuner:random", "--budget", "6",
        "--session", dir.string(), "--seed", "7" });
    ASSERT_EQ(run.exitCode, 0) << run.out << run.err;
    const kl::Session s = kl::SessionStore::load(dir);
    EXPECT_EQ(s.settings.regimes, "problem");

    // Every measured evaluation is judged per regime, on held-out shapes drawn inside each regime, some of them timed.
    int measured = 0;
    for (const auto& [id, e] : s.evaluations) {
        if (e.shapes.empty() || e.verdict == kl::Verdict::CompileFailed)
            continue;
        ++measured;
        ASSERT_EQ(e.regimes.size(), 2u) << id;
        EXPECT_EQ(e.regimes[0].name, "decode");
        EXPECT_EQ(e.regimes[1].condition, "T > 256");
        int heldOutDecode = 0, heldOutPrefill = 0, timedDecode = 0, timedPrefill = 0;
        for (const kl::ShapeResult& r : e.shapes) {
            if (!r.heldOut)
                continue;
            const bool decode = r.shape.dims.at("T") <= 256;
            (decode ? heldOutDecode : heldOutPrefill) += 1;
            if (r.timing && r.speedup > 0)
                (decode ? timedDecode : timedPrefill) += 1;
        }
        EXPECT_GE(heldOutDecode, 4) << id;
        EXPECT_GE(heldOutPrefill, 4) << id;
        EXPECT_EQ(timedDecode, 2) << id;
        EXPECT_EQ(timedPrefill, 2) << id;
        EXPECT_GT(e.regimes[0].verifiedShapes, heldOutDecode) << id; // the regime's visible shapes too
    }
    EXPECT_GT(measured, 2);
    const auto winners = kl::regimeWinners(s);
    ASSERT_EQ(winners.size(), 2u);
    ASSERT_TRUE(winners[0].winner);
    ASSERT_TRUE(winners[1].winner);
    EXPECT_GT(winners[1].result.objective, 1.0);

    const ProcessResult show = kloop({ "session", "show", dir.string() });
    ASSERT_EQ(show.exitCode, 0) << show.err;
    EXPECT_NE(show.out.find("regimes (a best per regime"), std::string::npos) << show.out;
    EXPECT_NE(show.out.find("  decode       T <= 256                 " + *winners[0].winner), std::string::npos)
        << show.out;
    const ProcessResult showJson = kloop({ "session", "show", dir.string(), "--json" });
    ASSERT_EQ(showJson.exitCode, 0) << showJson.err;
    const auto j = nlohmann::json::parse(showJson.out);
    ASSERT_EQ(j.at("regimes").size(), 2u);
    EXPECT_EQ(j.at("regimes")[1].at("winner"), *winners[1].winner);
    EXPECT_EQ(j.at("regimes")[1].at("verified_shapes"), winners[1].result.verifiedShapes);

    const fs::path out = scratch / "bundle";
    const ProcessResult exported = kloop({ "export", dir.string(), "--out", out.string(), "--json" });
    ASSERT_EQ(exported.exitCode, 0) << exported.out << exported.err;
    const auto ej = nlohmann::json::parse(exported.out);
    ASSERT_EQ(ej.at("regimes").size(), 2u);
    EXPECT_EQ(ej.at("regimes")[0].at("candidate"), *winners[0].winner);
    EXPECT_TRUE(fs::exists(out / "include" / "kl_rmsnorm_regimes.h"));
    EXPECT_TRUE(fs::exists(out / "decode" / "include" / "kl_rmsnorm_decode.h"));
    EXPECT_TRUE(fs::exists(out / "prefill" / "src" / "kl_rmsnorm_prefill_dispatch.c"));
    // --candidate still exports the one candidate as a plain bundle.
    const ProcessResult one
        = kloop({ "export", dir.string(), "--out", (scratch / "one").string(), "--candidate", *winners[1].winner });
    ASSERT_EQ(one.exitCode, 0) << one.out << one.err;
    EXPECT_TRUE(fs::exists(scratch / "one" / "include" / "kl_rmsnorm.h"));
}

// `kloop session regimes` on a real session: the test double's candidates are faster or slower by one efficiency at
// every shape, so their per-shape winners never change: rmsnorm's decode / prefill regimes stand and, learned from
// scratch, one regime serves, whatever the minimum gain.
TEST_F(KloopCli, SessionRegimesFindsNoSplitWhereThePerShapeWinnersAgree)
{
    const fs::path dir = scratch / "learn";
    const ProcessResult run = kloop({ "run", "--problem", "rmsnorm", "--agent", "tuner:random", "--budget", "5",
        "--session", dir.string(), "--seed", "11" });
    ASSERT_EQ(run.exitCode, 0) << run.out << run.err;
    const kl::Session s = kl::SessionStore::load(dir);
    const ProcessResult learned
        = kloop({ "session", "regimes", dir.string(), "--min-gain", "0", "--from-scratch", "--json" });
    ASSERT_EQ(learned.exitCode, 0) << learned.err;
    const auto j = nlohmann::json::parse(learned.out);
    // The single best is the highest geometric mean over the visible tuning shapes.
    std::string best;
    double bestMean = 0;
    int correct = 0;
    for (const auto& [id, e] : s.evaluations) {
        double logSum = 0;
        int timed = 0;
        for (const kl::ShapeResult& r : e.shapes)
            if (!r.heldOut && r.speedup > 0) {
                logSum += std::log(r.speedup);
                ++timed;
            }
        if (!e.correctEverywhere() || timed == 0)
            continue;
        ++correct;
        if (std::exp(logSum / timed) > bestMean) {
            bestMean = std::exp(logSum / timed);
            best = id;
        }
    }
    EXPECT_EQ(j.at("configurations").get<int>(), correct);
    EXPECT_EQ(j.at("tuning_shapes"), 5); // rmsnorm's, as the session timed them
    EXPECT_GE(correct, 2);
    EXPECT_EQ(j.at("single_best"), best);
    EXPECT_NEAR(j.at("single_objective").get<double>(), bestMean, 1e-9);
    EXPECT_EQ(j.at("regimes").size(), 1u);
    EXPECT_EQ(j.at("regimes")[0].at("when"), "1");
    EXPECT_EQ(j.at("problem_json"), nlohmann::json::array());
    EXPECT_DOUBLE_EQ(j.at("objective").get<double>(), j.at("single_objective").get<double>());
    const ProcessResult text = kloop({ "session", "regimes", dir.string(), "--from-scratch" });
    ASSERT_EQ(text.exitCode, 0) << text.err;
    EXPECT_NE(text.out.find("one regime serves the tuning shapes"), std::string::npos) << text.out;
    const ProcessResult refined = kloop({ "session", "regimes", dir.string(), "--min-gain", "0", "--json" });
    ASSERT_EQ(refined.exitCode, 0) << refined.err;
    const auto r = nlohmann::json::parse(refined.out);
    ASSERT_EQ(r.at("regimes").size(), 2u);
    EXPECT_EQ(r.at("regimes")[0].at("name"), "decode");
    EXPECT_EQ(r.at("regimes")[1].at("when"), "T > 256");
    EXPECT_EQ(r.at("problem_json").size(), 2u);
    EXPECT_EQ(r.at("cuts"), 0);
    EXPECT_TRUE(r.at("problem_written").is_null());
    EXPECT_NE(kloop({ "session", "regimes", dir.string() }).out.find("the problem's regimes stand"), std::string::npos);
    // Written out from scratch, the problem's copy has one regime: its decode / prefill split is dropped, and a
    // session runs on it.
    const fs::path copy = scratch / "rmsnorm-learned";
    const ProcessResult wrote
        = kloop({ "session", "regimes", dir.string(), "--from-scratch", "--write-problem", copy.string() });
    ASSERT_EQ(wrote.exitCode, 0) << wrote.err;
    EXPECT_NE(wrote.out.find("wrote " + copy.string() + "/problem.json"), std::string::npos) << wrote.out;
    EXPECT_TRUE(kl::loadProblem(copy.string()).regimes.empty());
    const ProcessResult rerun = kloop({ "run", "--problem", copy.string(), "--agent", "tuner:random", "--budget", "2",
        "--session", (scratch / "learned-run").string(), "--seed", "3" });
    ASSERT_EQ(rerun.exitCode, 0) << rerun.out << rerun.err;
    for (const auto& [id, e] : kl::SessionStore::load(scratch / "learned-run").evaluations)
        EXPECT_TRUE(e.regimes.empty()) << id;
    EXPECT_EQ(kloop({ "session", "regimes", dir.string(), "--write-problem", copy.string() }).exitCode, 1);

    EXPECT_EQ(kloop({ "session", "regimes" }).exitCode, 2);
    EXPECT_EQ(kloop({ "session", "regimes", dir.string(), "--max-regimes", "0" }).exitCode, 2);
    const ProcessResult missing = kloop({ "session", "regimes", (scratch / "nothing").string() });
    EXPECT_EQ(missing.exitCode, 1);
    EXPECT_NE(missing.err.find("nothing"), std::string::npos) << missing.err;
}

TEST_F(KloopCli, RegimesTheSingleSettingRunsOneObjective)
{
    const fs::path dir = scratch / "single";
    ASSERT_EQ(kloop({ "session", "new", dir.string(), "--problem", "rmsnorm", "--agent", "tuner:random", "--regimes",
                        "single" })
                  .exitCode,
        0);
    const ProcessResult run = kloop({ "run", "--resume", dir.string(), "--agent", "tuner:random", "--budget", "3" });
    ASSERT_EQ(run.exitCode, 0) << run.out << run.err;
    const kl::Session s = kl::SessionStore::load(dir);
    EXPECT_EQ(s.settings.regimes, "single");
    for (const auto& [id, e] : s.evaluations)
        EXPECT_TRUE(e.regimes.empty()) << id;
    EXPECT_TRUE(kl::regimeWinners(s).empty());
}

// --graph-mode reaches the worker: always times every shape as graph replays, never none, auto only the shapes under
// 20 us (rmsnorm's tuning shapes hold both kinds); a value that is none of the three is refused before any GPU work.
TEST_F(KloopCli, EvalGraphModeDecidesWhichShapesAreTimedAsGraphReplays)
{
    const fs::path file = scratch / "graph-mode.cu";
    std::ofstream(file) << kl::test::readTextFile(
        fs::path(KL_SOURCE_DIR) / "kernels" / "problems" / "rmsnorm" / "template.cu");
    auto graphShapes = [&](const std::string& mode) {
        const ProcessResult r
            = kloop({ "eval", "rmsnorm", file.string(), "--seconds", "0.05", "--graph-mode", mode, "--json" });
        EXPECT_EQ(r.exitCode, 0) << mode << ": " << r.err;
        const auto e = nlohmann::json::parse(r.out, nullptr, false);
        std::pair<int, int> graphAndTimed { 0, 0 };
        for (const auto& shape : e.value("shapes", nlohmann::json::array()))
            if (shape.contains("timing")) {
                ++graphAndTimed.second;
                graphAndTimed.first += shape["timing"].value("graph_mode", false);
            }
        return graphAndTimed;
    };
    const auto always = graphShapes("always"), never = graphShapes("never"), automatic = graphShapes("auto");
    ASSERT_GT(always.second, 1);
    EXPECT_EQ(always.first, always.second);
    EXPECT_EQ(never.first, 0);
    EXPECT_GT(automatic.first, 0);
    EXPECT_LT(automatic.first, automatic.second);

    const ProcessResult bad = kloop({ "eval", "rmsnorm", file.string(), "--graph-mode", "sometimes" });
    EXPECT_NE(bad.exitCode, 0);
    EXPECT_NE(bad.err.find("--graph-mode must be auto, always or never, got 'sometimes'"), std::string::npos)
        << bad.err;
}

// An H200 running tensor cores for milliseconds sits at its power cap: that measurement is recorded, and it still
// counts (candidate and baseline samples alternate under the cap alike). A thermal slowdown sends it to review.
TEST_F(KloopCli, APowerCappedMeasurementCountsAndAThermalSlowdownGoesToReview)
{
    const std::string templateSource
        = kl::test::readTextFile(fs::path(KL_SOURCE_DIR) / "kernels" / "problems" / "rmsnorm" / "template.cu");
    auto evaluate = [&](const std::string& reasons) {
        const fs::path file = scratch / ("throttle-" + reasons + ".cu");
        std::ofstream(file) << "// kl-test-double: efficiency=0.6\n// kl-test-double: throttle=" << reasons << "\n"
                            << templateSource;
        const ProcessResult r = kloop({ "eval", "rmsnorm", file.string(), "--seconds", "0.05", "--json" });
        return std::make_pair(r.exitCode, nlohmann::json::parse(r.out, nullptr, false));
    };
    auto rules = [](const nlohmann::json& e) {
        std::set<std::string> out;
        for (const auto& r : e.value("reasons", nlohmann::json::array()))
            out.insert(r.value("rule", ""));
        return out;
    };
    auto timingsThrottled = [](const nlohmann::json& e) {
        int n = 0;
        for (const auto& s : e.value("shapes", nlohmann::json::array()))
            n += s.contains("timing") && s["timing"].value("throttled", false);
        return n;
    };

    const auto [capExit, capped] = evaluate("4");
    ASSERT_FALSE(capped.is_discarded());
    EXPECT_EQ(capExit, 0) << capped.dump(1);
    EXPECT_EQ(capped.value("verdict", ""), "correct") << capped.dump(1);
    EXPECT_FALSE(rules(capped).count("measurement.throttled"));
    EXPECT_GT(timingsThrottled(capped), 0) << "the cap is recorded with the timing";

    const auto [hotExit, hot] = evaluate("36"); // sw-thermal with the power cap
    ASSERT_FALSE(hot.is_discarded());
    EXPECT_EQ(hotExit, 1);
    EXPECT_EQ(hot.value("verdict", ""), "pending-review") << hot.dump(1);
    ASSERT_TRUE(rules(hot).count("measurement.throttled"));
    for (const auto& r : hot["reasons"])
        if (r.value("rule", "") == "measurement.throttled") {
            EXPECT_NE(r.value("message", "").find("(sw-power-cap,sw-thermal)"), std::string::npos) << r.dump();
            EXPECT_FALSE(r.value("blocking", true));
        }
}
