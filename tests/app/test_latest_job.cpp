// app/latest_job.h: of the background jobs started, only the latest one's result reaches the GUI.
#include "app/latest_job.h"

#include <QTest>
#include <QThreadPool>
#include <atomic>
#include <gtest/gtest.h>
#include <thread>
#include <vector>

using kl::app::LatestJob;

namespace {

// Blocks a pool thread until released, then returns `value`.
auto heldJob(std::atomic<bool>& release, int value)
{
    return [&release, value]() {
        while (!release)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return value;
    };
}

void drainPool()
{
    ASSERT_TRUE(QThreadPool::globalInstance()->waitForDone(5000));
    QTest::qWait(100); // the finished signals queued to this thread
}

} // namespace

TEST(LatestJob, AStaleResultNeverOverwritesANewerOne)
{
    QThreadPool::globalInstance()->setMaxThreadCount(std::max(2, QThreadPool::globalInstance()->maxThreadCount()));
    QObject owner;
    LatestJob<int> job(&owner);
    std::vector<int> shown;
    std::atomic<bool> release { false };
    job.start(heldJob(release, 1), [&](int v) { shown.push_back(v); });
    job.start([]() { return 2; }, [&](int v) { shown.push_back(v); });
    ASSERT_TRUE(QTest::qWaitFor([&]() { return !shown.empty(); }, 5000));
    release = true; // the older job finishes last
    drainPool();
    EXPECT_EQ(shown, std::vector<int> { 2 });

    job.start([]() { return 3; }, [&](int v) { shown.push_back(v); });
    drainPool();
    EXPECT_EQ(shown, (std::vector<int> { 2, 3 })) << "a job with nothing newer delivers";
}

TEST(LatestJob, DroppedJobsDeliverNothing)
{
    QObject owner;
    LatestJob<int> job(&owner);
    std::vector<int> shown;
    std::atomic<bool> release { false };
    job.start(heldJob(release, 1), [&](int v) { shown.push_back(v); });
    job.drop();
    release = true;
    drainPool();
    EXPECT_TRUE(shown.empty());
}
