#include "dispatch_latency.h"

#include <QCoreApplication>
#include <QEvent>
#include <QFile>
#include <QObject>
#include <QThread>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

namespace kl::test {

namespace {

    DispatchLatencyRecorder* g_recorder = nullptr;
    int g_depth = 0; // GUI thread only
    int g_schedstat = -1;

    struct Probe {
        double wallMs = 0;
        double cpuMs = 0;
        double runQueueMs = -1;
        long involuntary = 0;
    };

    double ms(const timespec& ts)
    {
        return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
    }

    Probe probe()
    {
        Probe p;
        p.wallMs
            = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
        timespec ts {};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        p.cpuMs = ms(ts);
        if (g_schedstat >= 0) {
            // "<ns on a cpu> <ns runnable, waiting on a run queue> <timeslices>"
            char buffer[128];
            const ssize_t n = ::pread(g_schedstat, buffer, sizeof buffer - 1, 0);
            if (n > 0) {
                buffer[n] = '\0';
                unsigned long long onCpu = 0, waiting = 0;
                if (std::sscanf(buffer, "%llu %llu", &onCpu, &waiting) == 2)
                    p.runQueueMs = static_cast<double>(waiting) / 1e6;
            }
        }
#ifdef RUSAGE_THREAD
        rusage ru {};
        if (getrusage(RUSAGE_THREAD, &ru) == 0)
            p.involuntary = ru.ru_nivcsw;
#endif
        return p;
    }

    QString loadAverage()
    {
        QFile f(QStringLiteral("/proc/loadavg"));
        if (!f.open(QIODevice::ReadOnly))
            return QStringLiteral("unknown");
        return QString::fromLatin1(f.readAll()).section(QLatin1Char(' '), 0, 2);
    }

    QString describe(const DispatchSample& s)
    {
        QString text = QStringLiteral("%1 ms wall, %2 ms CPU").arg(s.wallMs, 0, 'f', 1).arg(s.cpuMs, 0, 'f', 1);
        if (s.runQueueMs >= 0)
            text += QStringLiteral(", %1 ms waiting for a core").arg(s.runQueueMs, 0, 'f', 1);
        text += QStringLiteral(", %1 involuntary context switches (event type %2 to %3)")
                    .arg(s.involuntarySwitches)
                    .arg(s.eventType)
                    .arg(s.receiver);
        return text;
    }

} // namespace

DispatchLatencyRecorder::DispatchLatencyRecorder()
{
    m_samples.reserve(1 << 15);
    if (g_schedstat < 0)
        g_schedstat = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    m_loadBefore = loadAverage();
    g_recorder = this;
}

DispatchLatencyRecorder::~DispatchLatencyRecorder()
{
    if (g_recorder == this)
        g_recorder = nullptr;
}

void DispatchLatencyRecorder::stop()
{
    if (m_running)
        m_loadAfter = loadAverage();
    m_running = false;
}

bool DispatchLatencyRecorder::timedNotify(
    QObject* receiver, QEvent* event, bool (*deliver)(QObject*, QEvent*, void*), void* ctx)
{
    DispatchLatencyRecorder* recorder = g_recorder;
    if (!recorder || !recorder->m_running || g_depth > 0
        || QThread::currentThread() != QCoreApplication::instance()->thread())
        return deliver(receiver, event, ctx);
    // Read before delivery: the receiver and the event may not survive it (deferred deletes).
    DispatchSample s;
    s.eventType = static_cast<int>(event->type());
    s.receiver = QString::fromLatin1(receiver->metaObject()->className());
    if (!receiver->objectName().isEmpty())
        s.receiver += QLatin1Char(' ') + receiver->objectName();
    const Probe before = probe();
    ++g_depth;
    const bool result = deliver(receiver, event, ctx);
    --g_depth;
    const Probe after = probe();
    s.wallMs = after.wallMs - before.wallMs;
    s.cpuMs = after.cpuMs - before.cpuMs;
    s.runQueueMs = after.runQueueMs >= 0 && before.runQueueMs >= 0 ? after.runQueueMs - before.runQueueMs : -1;
    s.involuntarySwitches = after.involuntary - before.involuntary;
    if (g_recorder == recorder && recorder->m_running)
        recorder->m_samples.push_back(std::move(s));
    return result;
}

DispatchSummary DispatchLatencyRecorder::summary() const
{
    DispatchSummary out;
    out.count = m_samples.size();
    out.loadBefore = m_loadBefore;
    out.loadAfter = m_running ? loadAverage() : m_loadAfter;
    if (m_samples.empty())
        return out;
    out.runQueueKnown
        = std::all_of(m_samples.begin(), m_samples.end(), [](const DispatchSample& s) { return s.runQueueMs >= 0; });
    auto longest = [this](auto key) {
        return *std::max_element(m_samples.begin(), m_samples.end(),
            [&key](const DispatchSample& a, const DispatchSample& b) { return key(a) < key(b); });
    };
    out.longestWall = longest([](const DispatchSample& s) { return s.wallMs; });
    out.longestCpu = longest([](const DispatchSample& s) { return s.cpuMs; });
    out.longestOwn = longest([](const DispatchSample& s) { return s.ownMs(); });
    std::vector<double> walls;
    walls.reserve(m_samples.size());
    for (const auto& s : m_samples)
        walls.push_back(s.wallMs);
    std::sort(walls.begin(), walls.end());
    auto quantile = [&walls](double q) {
        return walls[std::min(walls.size() - 1, static_cast<std::size_t>(q * static_cast<double>(walls.size())))];
    };
    out.p99WallMs = quantile(0.99);
    out.p999WallMs = quantile(0.999);
    return out;
}

QStringList DispatchLatencyRecorder::violations(double limitMs) const
{
    QStringList out;
    for (const auto& s : m_samples) {
        const bool cpuBound = s.cpuMs >= limitMs;
        const bool waitedForACore = s.runQueueMs >= 0 ? s.ownMs() < limitMs : s.involuntarySwitches > 0;
        if (cpuBound || (s.wallMs >= limitMs && !waitedForACore))
            out << describe(s);
    }
    return out;
}

QString DispatchSummary::text() const
{
    return QStringLiteral("%1 GUI-thread dispatches; longest wall: %2; longest CPU: %3; longest wall minus time "
                          "waiting for a core: %4 ms%5; wall p99 %6 ms, p99.9 %7 ms; loadavg %8 before, %9 after")
        .arg(count)
        .arg(describe(longestWall), describe(longestCpu))
        .arg(longestOwn.ownMs(), 0, 'f', 1)
        .arg(runQueueKnown ? QString() : QStringLiteral(" (run-queue time not reported by this kernel)"))
        .arg(p99WallMs, 0, 'f', 1)
        .arg(p999WallMs, 0, 'f', 1)
        .arg(loadBefore, loadAfter);
}

} // namespace kl::test
