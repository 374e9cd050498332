// CPU parts of the harness: order statistics, held-out shapes, the wire format, and the worker client's
// crash/hang/restart handling against a fake worker process (no GPU needed).
#include "core/json_io.h"
#include "kernels/shape_sampler.h"
#include "kernels/stats.h"
#include "kernels/worker_client.h"
#include "kernels/worker_protocol.h"

#include <chrono>
#include <cmath>
#include <gtest/gtest.h>
#include <random>
#include <signal.h>

namespace {

std::string fakeWorker()
{
    return std::string(KL_SOURCE_DIR) + "/tests/kernels/fake_worker.sh";
}

kl::Problem problem(const std::string& name)
{
    return kl::loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/" + name);
}

} // namespace

TEST(Stats, MedianPercentilesAndConfidence)
{
    std::vector<double> v;
    for (int i = 1; i <= 101; ++i)
        v.push_back(i);
    std::shuffle(v.begin(), v.end(), std::mt19937(3));
    const auto t = kl::summarize(v, false, 1);
    EXPECT_DOUBLE_EQ(t.medianUs, 51);
    EXPECT_DOUBLE_EQ(t.p10Us, 11);
    EXPECT_DOUBLE_EQ(t.p90Us, 91);
    EXPECT_EQ(t.samples, 101);
    // Ranks n/2 -+ 0.98 sqrt(n): about 41..61 for n = 101.
    EXPECT_GE(t.ciLowUs, 39);
    EXPECT_LE(t.ciLowUs, 43);
    EXPECT_GE(t.ciHighUs, 59);
    EXPECT_LE(t.ciHighUs, 63);
    EXPECT_LT(t.ciLowUs, t.medianUs);
    EXPECT_GT(t.ciHighUs, t.medianUs);
}

TEST(Stats, ConfidenceNarrowsWithSamples)
{
    std::mt19937 rng(5);
    std::normal_distribution<double> noise(100.0, 2.0);
    std::vector<double> few, many;
    for (int i = 0; i < 20; ++i)
        few.push_back(noise(rng));
    for (int i = 0; i < 2000; ++i)
        many.push_back(noise(rng));
    const double wFew = kl::relativeHalfWidth(kl::summarize(few, false, 1));
    const double wMany = kl::relativeHalfWidth(kl::summarize(many, false, 1));
    EXPECT_GT(wFew, wMany * 4);
    EXPECT_LT(wMany, 0.01);
}

TEST(HeldOutShapes, ExtremesAndRandomShapesAreValid)
{
    const auto p = problem("rmsnorm");
    const auto ext = kl::extremeShapes(p);
    // all-min, T at max, H at max, all-max
    ASSERT_EQ(ext.size(), 4u);
    EXPECT_EQ(ext[0].dims.at("T"), 1);
    EXPECT_EQ(ext[0].dims.at("H"), 1024);
    EXPECT_EQ(ext[3].dims.at("T"), 65536);
    EXPECT_EQ(ext[3].dims.at("H"), 16384);
    const auto rnd = kl::randomShapes(p, 50, 11);
    EXPECT_EQ(rnd.size(), 50u);
    std::set<std::int64_t> distinctT;
    for (const auto& s : rnd) {
        EXPECT_TRUE(p.shapeIsValid(s)) << s.label();
        EXPECT_EQ(s.dims.at("H") % 8, 0);
        distinctT.insert(s.dims.at("T"));
    }
    EXPECT_GT(distinctT.size(), 30u) << "log-uniform draws spread over orders of magnitude";
    // Seeded: the same seed draws the same shapes, another seed others.
    EXPECT_EQ(kl::randomShapes(p, 5, 11), kl::randomShapes(p, 5, 11));
    EXPECT_NE(kl::randomShapes(p, 5, 11), kl::randomShapes(p, 5, 12));
}

TEST(HeldOutShapes, ConstraintsAreRespected)
{
    const auto p = problem("softmax"); // R * C <= 2^28: all-max is not a valid shape
    const auto ext = kl::extremeShapes(p);
    for (const auto& s : ext) {
        EXPECT_TRUE(p.shapeIsValid(s)) << s.label();
        EXPECT_LE(s.dims.at("R") * s.dims.at("C"), 268435456);
    }
    bool longestRow = false;
    for (const auto& s : ext)
        longestRow = longestRow || (s.dims.at("R") == 1 && s.dims.at("C") == 131072);
    EXPECT_TRUE(longestRow) << "one row at the longest context is always verified";
    for (const auto& s : kl::heldOutShapes(p, 20, 99))
        EXPECT_TRUE(p.shapeIsValid(s)) << s.label();
}

TEST(HeldOutShapes, DrawnInsideARegime)
{
    const auto p = problem("rmsnorm");
    ASSERT_EQ(p.regimes.size(), 2u);
    const auto decode = kl::heldOutShapes(p, 8, 7, true, &p.regimes[0]);
    const auto prefill = kl::heldOutShapes(p, 8, 7, true, &p.regimes[1]);
    EXPECT_GE(decode.size(), 8u);
    EXPECT_GE(prefill.size(), 8u);
    for (const auto& s : decode) {
        EXPECT_TRUE(p.shapeIsValid(s)) << s.label();
        EXPECT_LE(s.dims.at("T"), 256) << s.label();
    }
    for (const auto& s : prefill)
        EXPECT_GT(s.dims.at("T"), 256) << s.label();
    // The extremes that lie in the regime come first: T=1 at both H extremes for decode.
    EXPECT_EQ(decode[0].dims.at("T"), 1);
    EXPECT_EQ(kl::randomShapes(p, 6, 3, &p.regimes[0]), kl::randomShapes(p, 6, 3, &p.regimes[0]));
}

// Each shipped problem with regimes partitions its validity range: every shape sampled from it lies in exactly one.
TEST(HeldOutShapes, ShippedRegimesPartitionSampledShapes)
{
    // gemm_bf16 splits decode at M = 32, where the per-shape winner changes (the skinny path beats cuBLAS at M = 16,
    // not at M = 128): every regime must yield held-out shapes, or a winner there ships unchecked beyond its tuning
    // shapes.
    for (const auto& [name, regimes] : { std::pair { "rmsnorm", 2u }, std::pair { "silu_and_mul", 2u },
             std::pair { "softmax", 2u }, std::pair { "gemm_bf16", 3u } }) {
        const auto p = problem(name);
        EXPECT_EQ(p.regimes.size(), regimes) << name;
        EXPECT_EQ(kl::regimePartitionError(p, kl::heldOutShapes(p, 500, 1234), "sampled shape"), "") << name;
        // What the evaluator times in each regime: random draws inside it, the corner shapes left out.
        for (const auto& regime : p.regimes) {
            const auto drawn = kl::heldOutShapes(p, 4, 99, false, &regime);
            EXPECT_EQ(drawn.size(), 4u) << name << " " << regime.name;
            for (const auto& s : drawn)
                EXPECT_EQ(p.regimesOf(s).size(), 1u) << name << " " << regime.name << " " << s.label();
        }
    }
}

TEST(Wire, Base64RoundTripsBinary)
{
    std::string bytes;
    for (int i = 0; i < 1000; ++i)
        bytes += static_cast<char>((i * 37) & 255);
    for (std::size_t n : { 0u, 1u, 2u, 3u, 4u, 5u, 999u, 1000u }) {
        const std::string s = bytes.substr(0, n);
        EXPECT_EQ(kl::wire::base64Decode(kl::wire::base64Encode(s)), s) << n;
    }
    EXPECT_EQ(kl::wire::base64Encode("Man"), "TWFu");
    EXPECT_EQ(kl::wire::base64Encode("Ma"), "TWE=");
    EXPECT_THROW(kl::wire::base64Decode("abc"), std::invalid_argument);
    EXPECT_THROW(kl::wire::base64Decode("a*cd"), std::invalid_argument);
}

TEST(Wire, ShapeResultRoundTrips)
{
    kl::ShapeResult s;
    s.shape.dims = { { "T", 7 }, { "H", 4096 } };
    s.shape.weight = 2;
    s.heldOut = true;
    s.correct = true;
    kl::CorrectnessStats c;
    c.relL2 = 1e-3;
    c.maxAbs = 0.01;
    c.seed = 123456789012345ull;
    c.distribution = "order:A'";
    c.passed = true;
    s.checks.push_back(c);
    kl::TimingStats t;
    t.medianUs = 12.5;
    t.samples = 40;
    t.graphMode = true;
    t.launchesPerSample = 16;
    s.timing = t;
    s.speedup = 1.7;
    const auto back = kl::wire::shapeResult(kl::wire::toJson(s));
    EXPECT_EQ(back.shape.dims, s.shape.dims);
    EXPECT_TRUE(back.heldOut);
    ASSERT_EQ(back.checks.size(), 1u);
    EXPECT_EQ(back.checks[0].seed, c.seed);
    EXPECT_EQ(back.checks[0].distribution, "order:A'");
    ASSERT_TRUE(back.timing);
    EXPECT_DOUBLE_EQ(back.timing->medianUs, 12.5);
    EXPECT_EQ(back.timing->launchesPerSample, 16);
    EXPECT_FALSE(back.baselineTiming);
    EXPECT_DOUBLE_EQ(back.speedup, 1.7);
}

TEST(WorkerClient, StartsAndAnswers)
{
    kl::WorkerOptions o;
    o.command = { fakeWorker() };
    kl::WorkerClient client(o);
    EXPECT_EQ(client.device().name, "Fake GPU");
    EXPECT_EQ(client.device().arch, "sm_90a");
    const auto r = client.request({ { "op", "ping" } }, 5);
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(client.starts(), 1);
}

TEST(WorkerClient, HangCostsOnlyTheWorker)
{
    kl::WorkerOptions o;
    o.command = { fakeWorker() };
    kl::WorkerClient client(o);
    client.ensureStarted();
    const pid_t first = client.pid();
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = client.request({ { "op", "hang" } }, 0.5);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.status, kl::WorkerClient::Status::TimedOut);
    EXPECT_LT(took, 3.0);
    EXPECT_EQ(::kill(first, 0), -1) << "the hung worker was killed";
    const auto next = client.request({ { "op", "ping" } }, 5);
    EXPECT_TRUE(next.ok()) << next.error;
    EXPECT_EQ(client.starts(), 2);
    EXPECT_EQ(client.timeouts(), 1);
    EXPECT_NE(client.pid(), first);
}

TEST(WorkerClient, CrashAndStickyErrorRestart)
{
    kl::WorkerOptions o;
    o.command = { fakeWorker() };
    kl::WorkerClient client(o);
    auto r = client.request({ { "op", "crash" } }, 5);
    EXPECT_EQ(r.status, kl::WorkerClient::Status::Crashed);
    EXPECT_NE(r.error.find("exit 9"), std::string::npos) << r.error;
    r = client.request({ { "op", "fatal" } }, 5);
    EXPECT_EQ(r.status, kl::WorkerClient::Status::Crashed);
    EXPECT_NE(r.error.find("ILLEGAL_ADDRESS"), std::string::npos);
    r = client.request({ { "op", "bad" } }, 5);
    EXPECT_EQ(r.status, kl::WorkerClient::Status::Error) << "an ordinary error keeps the worker";
    const pid_t pid = client.pid();
    r = client.request({ { "op", "ping" } }, 5);
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(client.pid(), pid);
    EXPECT_EQ(client.crashes(), 2);
    EXPECT_EQ(client.starts(), 3);
}

TEST(WorkerClient, SetupRequestsAreReplayedAfterRestart)
{
    kl::WorkerOptions o;
    o.command = { fakeWorker() };
    kl::WorkerClient client(o);
    EXPECT_TRUE(client.addSetup({ { "op", "load_problem" } }).ok());
    client.ensureStarted();
    EXPECT_EQ(client.request({ { "op", "crash" } }, 5).status, kl::WorkerClient::Status::Crashed);
    EXPECT_TRUE(client.request({ { "op", "noise" } }, 5).body.value("after_noise", false))
        << "stray lines and stale ids are skipped";
    EXPECT_EQ(client.starts(), 2);
}

TEST(WorkerClient, MissingBinaryIsAnErrorNotACrash)
{
    kl::WorkerOptions o;
    o.command = { "/nonexistent/kloop-worker" };
    kl::WorkerClient client(o);
    const auto r = client.request({ { "op", "ping" } }, 5);
    EXPECT_EQ(r.status, kl::WorkerClient::Status::Error);
    EXPECT_FALSE(r.error.empty());
}
