#pragma once
// How long the GUI thread spends on each event it dispatches (timers, queued calls, paints, input): the test
// application's notify() times every outermost dispatch on the GUI thread while a recorder is alive. Each
// dispatch gets its wall-clock time, the GUI thread's CPU time and, from /proc/thread-self/schedstat, the
// time the thread sat runnable on a run queue waiting for a core: wall time minus that wait is what the
// dispatch itself kept the GUI waiting, whatever else loads the machine.
#include <QString>
#include <QStringList>
#include <vector>

class QEvent;
class QObject;

namespace kl::test {

struct DispatchSample {
    double wallMs = 0;
    double cpuMs = 0; // the GUI thread's CPU time
    double runQueueMs = -1; // waiting for a core (descheduled); < 0 where the kernel does not report it
    long involuntarySwitches = 0; // preemptions during the dispatch
    int eventType = 0;
    QString receiver; // class and object name
    double ownMs() const { return runQueueMs >= 0 ? wallMs - runQueueMs : wallMs; } // wall minus descheduled time
};

struct DispatchSummary {
    std::size_t count = 0;
    DispatchSample longestWall;
    DispatchSample longestCpu;
    DispatchSample longestOwn; // wall minus descheduled time
    double p99WallMs = 0;
    double p999WallMs = 0;
    bool runQueueKnown = false;
    QString loadBefore; // /proc/loadavg
    QString loadAfter;
    QString text() const;
};

class DispatchLatencyRecorder {
public:
    DispatchLatencyRecorder();
    ~DispatchLatencyRecorder();
    DispatchLatencyRecorder(const DispatchLatencyRecorder&) = delete;
    DispatchLatencyRecorder& operator=(const DispatchLatencyRecorder&) = delete;

    void stop();
    const std::vector<DispatchSample>& samples() const { return m_samples; }
    DispatchSummary summary() const;
    // Dispatches that kept the GUI thread from its events for limitMs or more: any whose CPU time reached it,
    // and any whose wall time reached it other than by waiting for a core (the machine's load, shown by the
    // run-queue time; where the kernel does not report it, by preemptions during the dispatch).
    QStringList violations(double limitMs) const;

    // Called by the test application's notify(); the recorder (if any) times the dispatch.
    static bool timedNotify(QObject* receiver, QEvent* event, bool (*deliver)(QObject*, QEvent*, void*), void* ctx);

private:
    std::vector<DispatchSample> m_samples;
    QString m_loadBefore;
    QString m_loadAfter;
    bool m_running = true;
};

} // namespace kl::test
