// The typed worker protocol (kernels/worker_protocol.h) and the client's heartbeat, version check and deadlines
// (kernels/worker_client.h), against the worker test double speaking through kernels/worker_serve.
#include "core/errors.h"
#include "kernels/gpu_evaluator.h"
#include "kernels/worker_client.h"
#include "kernels/worker_protocol.h"
#include "pool_test_support.h"

#include <gtest/gtest.h>
#include <thread>

using namespace kl;
using namespace kl::test;

namespace {

WorkerOptions fakeWorker(double heartbeat = 10)
{
    WorkerOptions o;
    o.command = { KL_FAKE_WORKER_PATH };
    o.name = "local:test";
    o.heartbeatSeconds = heartbeat;
    return o;
}

// The double's time op on the problem's template with a marker, through the typed call.
WorkerClient::Typed<wire::TimeRequest> timeOn(
    WorkerClient& client, const Problem& p, const std::string& marker, double timeout)
{
    wire::LoadProblemRequest load;
    load.problem = p;
    load.referenceSource = readFile(std::filesystem::path(p.folder) / p.referenceFile);
    load.baselineSource = readFile(std::filesystem::path(p.folder) / p.baselineFile);
    EXPECT_TRUE(client.addSetup(wire::toJson(load)).ok());
    wire::TimeRequest t;
    t.problem = p.name;
    t.candidate.source = markedCandidate(p, "c", marker).source;
    t.shapes = p.tuningShapes;
    return client.call(t, timeout);
}

} // namespace

TEST(TypedProtocol, RequestsAndRepliesRoundTrip)
{
    wire::VerifyRequest v;
    v.problem = "rmsnorm";
    v.candidate.source = "src";
    v.candidate.params = { { "THREADS", 128 } };
    v.candidate.cubin = std::string("\x7f"
                                    "ELF\0\1",
        6);
    v.candidate.lowered = { { "k", "_Z1kv" } };
    Shape s;
    s.dims = { { "T", 4 } };
    v.shapes = { s, s };
    v.heldOut = { false, true };
    v.seed = 1ull << 60;
    v.cupti = false;
    const auto back = wire::parse<wire::VerifyRequest>(wire::toJson(v));
    EXPECT_EQ(wire::toJson(v).at("op"), "verify");
    EXPECT_EQ(back.candidate.params, v.candidate.params);
    EXPECT_EQ(*back.candidate.cubin, *v.candidate.cubin) << "binary survives base64";
    EXPECT_EQ(back.candidate.lowered, v.candidate.lowered);
    EXPECT_EQ(back.heldOut, v.heldOut);
    EXPECT_EQ(back.seed, v.seed);
    EXPECT_FALSE(back.cupti);

    wire::TimeReply t;
    t.ran = true;
    wire::TimedShape ts;
    ts.result.shape = s;
    ts.throttled = true;
    ts.rotationBytes = 1ull << 40;
    ts.candidateSamplesUs = { 1.5, 2.5 };
    t.shapes.push_back(ts);
    t.reasons.push_back({ "measurement.x", "why", 0, false });
    const auto tb = wire::parse<wire::TimeReply>(wire::toJson(t));
    ASSERT_TRUE(tb.ran);
    ASSERT_EQ(tb.shapes.size(), 1u);
    EXPECT_TRUE(tb.shapes[0].throttled);
    EXPECT_EQ(tb.shapes[0].rotationBytes, 1ull << 40);
    EXPECT_EQ(tb.shapes[0].candidateSamplesUs, ts.candidateSamplesUs);
    ASSERT_EQ(tb.reasons.size(), 1u);
    EXPECT_EQ(tb.reasons[0].rule, "measurement.x");

    wire::TimeReply notRun;
    EXPECT_FALSE(wire::parse<wire::TimeReply>(wire::toJson(notRun)).ran) << "no module: nothing ran";
}

TEST(TypedProtocol, MalformedMessagesNameTheField)
{
    auto error = [](auto parseIt) {
        try {
            parseIt();
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    EXPECT_NE(error([] {
        wire::parse<wire::VerifyReply>({ { "compile", { { "ok", true } } }, { "shapes", 3 } });
    }).find("verify reply.shapes: expected an array"),
        std::string::npos);
    EXPECT_NE(error([] { wire::parse<wire::TimeRequest>({ { "problem", "p" } }); }).find("time"), std::string::npos);
    EXPECT_NE(error([] {
        wire::parse<wire::CompileRequest>({ { "candidate", { { "source", "s" }, { "params", { { "T", "x" } } } } } });
    }).find("compile.candidate.params.T: expected an integer"),
        std::string::npos);
    EXPECT_NE(error([] {
        wire::parse<wire::TimeRequest>({ { "problem", "p" }, { "candidate", { { "source", "s" } } },
            { "shapes", nlohmann::json::array() }, { "graph_mode", "sometimes" } });
    }).find("time.graph_mode: 'sometimes'"),
        std::string::npos);
}

TEST(TypedProtocol, HelloCarriesVersionsAndAMismatchSaysHowToFixIt)
{
    WorkerClient client(fakeWorker());
    client.ensureStarted();
    EXPECT_EQ(client.hello().protocol, wire::kProtocolVersion);
    EXPECT_EQ(client.hello().workerVersion, wire::softwareVersion());
    EXPECT_TRUE(client.hello().testDouble);
    EXPECT_EQ(client.hello().pid, client.pid());

    WorkerOptions old = fakeWorker();
    old.environment = { { "KL_FAKE_WORKER_PROTOCOL", "1" } };
    old.installHint = "ssh box 'install kloop-worker'";
    WorkerClient stale(old);
    try {
        stale.ensureStarted();
        FAIL() << "a worker of another protocol was accepted";
    } catch (const WorkerVersionError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("worker local:test speaks protocol 1"), std::string::npos) << m;
        EXPECT_NE(m.find("this kloop speaks protocol " + std::to_string(wire::kProtocolVersion)), std::string::npos)
            << m;
        EXPECT_NE(m.find("install the matching worker on that host: ssh box 'install kloop-worker'"), std::string::npos)
            << m;
    }
    EXPECT_FALSE(stale.running());
}

TEST(TypedProtocol, HeartbeatsKeepALongRequestAlive)
{
    // The time op sleeps 1.5 s; with a 0.2 s heartbeat the client pings about 7 times and each is answered.
    WorkerClient client(fakeWorker(0.2));
    const Problem p = poolProblem();
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = timeOn(client, p, "kl-test-double: time-sleep-ms=1500", 30);
    ASSERT_TRUE(r.ok()) << r.reply.error;
    EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.4);
    EXPECT_EQ(r.value->shapes.size(), p.tuningShapes.size());
    EXPECT_EQ(client.lost(), 0);
}

TEST(TypedProtocol, ASilentWorkerIsLostWithinTwoHeartbeatsNotAtTheDeadline)
{
    WorkerClient client(fakeWorker(0.3));
    const Problem p = poolProblem();
    client.ensureStarted();
    const pid_t pid = client.pid();
    std::thread stopper([pid] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ::kill(pid, SIGSTOP); // a frozen host or a cut network: nothing answers, nothing closes
    });
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = timeOn(client, p, "kl-test-double: time-sleep-ms=20000", 120);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stopper.join();
    EXPECT_EQ(r.reply.status, WorkerClient::Status::Lost) << r.reply.error;
    EXPECT_NE(r.reply.error.find("answered no heartbeat"), std::string::npos) << r.reply.error;
    EXPECT_LT(took, 5.0) << "lost after two heartbeats, not after the 120 s deadline";
    EXPECT_EQ(::kill(pid, 0), -1) << "the frozen worker was killed";
    EXPECT_EQ(client.lost(), 1);
}

TEST(TypedProtocol, EveryOpOfTheDoubleAnswersTyped)
{
    WorkerClient client(fakeWorker());
    const Problem p = poolProblem();
    const auto sample = client.call(wire::SampleRequest {}, 10);
    ASSERT_TRUE(sample.ok()) << sample.reply.error;
    const auto ping = client.call(wire::PingRequest {}, 10);
    ASSERT_TRUE(ping.ok()) << ping.reply.error;
    EXPECT_EQ(ping.value->busyOp, "") << "idle between requests";
    wire::CompileRequest c;
    c.candidate.source = readFile(std::filesystem::path(p.folder) / p.templateFile);
    const auto compiled = client.call(c, 120);
    ASSERT_TRUE(compiled.ok()) << compiled.reply.error;
    EXPECT_TRUE(compiled.value->report.ok) << compiled.value->report.log;
    EXPECT_FALSE(compiled.value->key.empty());
    wire::TraceRequest tr;
    tr.problem = p.name;
    tr.candidate = c.candidate;
    const auto traced = client.call(tr, 30);
    EXPECT_EQ(traced.reply.status, WorkerClient::Status::Error) << "the double has no kernel records";
}
