#include "app/local_run.h"

#include "kernels/pool/worker_spec.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QStandardPaths>
#include <QTimer>
#include <algorithm>
#include <csignal>
#include <mutex>

namespace kl::app {

namespace {

    std::mutex g_probeMutex;
    std::function<bool()> g_probe;

    bool driverListsAGpu()
    {
        // The NVIDIA driver lists its GPUs here; asking CUDA would load the driver on the GUI thread.
        const QDir gpus(QStringLiteral("/proc/driver/nvidia/gpus"));
        if (gpus.exists() && !gpus.entryList(QDir::Dirs | QDir::NoDotAndDotDot).isEmpty())
            return true;
        // WSL 2 has no /proc/driver/nvidia: the GPU is behind /dev/dxg and the Windows driver maps its libcuda in.
        return QFileInfo::exists(QStringLiteral("/dev/dxg"))
            && !QDir(QStringLiteral("/usr/lib/wsl/lib"))
                    .entryList({ QStringLiteral("libcuda.so*") }, QDir::Files)
                    .isEmpty();
    }

    bool processAlive(qint64 pid)
    {
        if (pid <= 0)
            return false;
#ifdef Q_OS_LINUX
        // A child nobody reaped yet is gone for our purposes; /proc says so where kill(pid, 0) cannot.
        QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
        if (!stat.open(QIODevice::ReadOnly))
            return false;
        const QByteArray line = stat.readAll();
        const int close = line.lastIndexOf(')');
        return close < 0 || close + 2 >= line.size() || (line.at(close + 2) != 'Z' && line.at(close + 2) != 'X');
#else
        return ::kill(static_cast<pid_t>(pid), 0) == 0;
#endif
    }

} // namespace

bool localGpuPresent()
{
    {
        std::lock_guard lock(g_probeMutex);
        if (g_probe)
            return g_probe();
    }
    const QByteArray forced = qgetenv("KL_LOCAL_GPU");
    if (!forced.isEmpty())
        return forced != "0";
    return driverListsAGpu();
}

void setLocalGpuProbe(std::function<bool()> probe)
{
    std::lock_guard lock(g_probeMutex);
    g_probe = std::move(probe);
}

QString kloopExecutable()
{
    const QString forced = qEnvironmentVariable("KL_KLOOP");
    if (!forced.isEmpty())
        return QFileInfo(forced).isExecutable() ? QFileInfo(forced).absoluteFilePath() : QString();
    const QDir appDir(QCoreApplication::applicationDirPath());
    for (const QString& candidate :
        { appDir.filePath(QStringLiteral("kloop")), appDir.filePath(QStringLiteral("../cli/kloop")) }) {
        if (QFileInfo(candidate).isExecutable())
            return QFileInfo(candidate).absoluteFilePath();
    }
    return QStandardPaths::findExecutable(QStringLiteral("kloop"));
}

QString defaultSessionRoot()
{
    const QString forced = qEnvironmentVariable("KL_SESSIONS_DIR");
    if (!forced.isEmpty())
        return QDir(forced).absolutePath();
    return QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation)).filePath(QStringLiteral("sessions"));
}

bool usesLocalGpu(const LocalRunRequest& request)
{
    if (request.workers.isEmpty())
        return true;
    try {
        const auto specs = kl::parseWorkerSpecs(request.workers.toStdString());
        return std::any_of(
            specs.begin(), specs.end(), [](const kl::WorkerSpec& w) { return w.kind == kl::WorkerSpec::Kind::Local; });
    } catch (const std::exception&) {
        return false; // kloop run refuses them before it touches a GPU
    }
}

LocalRunLauncher::LocalRunLauncher(QObject* parent)
    : QObject(parent)
    , m_poll(new QTimer(this))
{
    m_poll->setInterval(200);
    connect(m_poll, &QTimer::timeout, this, &LocalRunLauncher::poll);
}

bool LocalRunLauncher::isWaiting() const
{
    return m_poll->isActive();
}

bool LocalRunLauncher::start(const LocalRunRequest& request, QString* error)
{
    auto fail = [error](const QString& message) {
        if (error)
            *error = message;
        return false;
    };
    if (m_poll->isActive())
        return fail(tr("a run is already starting in %1").arg(QDir::toNativeSeparators(m_dir)));
    const QString kloop = kloopExecutable();
    if (kloop.isEmpty())
        return fail(tr("kloop was not found next to kernelloop, in the build tree or on PATH (set KL_KLOOP)"));
    const QString root = request.sessionRoot.isEmpty() ? defaultSessionRoot() : request.sessionRoot;
    if (!QDir().mkpath(root))
        return fail(tr("cannot create the sessions folder %1").arg(QDir::toNativeSeparators(root)));
    const QString stem = QStringLiteral("%1-%2").arg(
        request.problem, QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss")));
    QString name = stem;
    for (int n = 2; QFileInfo::exists(QDir(root).filePath(name)); ++n)
        name = QStringLiteral("%1-%2").arg(stem).arg(n);
    m_dir = QDir(root).filePath(name);
    // Next to the session, not in it: kloop run wants an empty directory. The output explains a failed start.
    m_log = m_dir + QStringLiteral(".log");
    m_args = { QStringLiteral("run"), QStringLiteral("--problem"), request.problem, QStringLiteral("--agent"),
        request.agent, QStringLiteral("--session"), m_dir };
    if (!request.workers.isEmpty())
        m_args << QStringLiteral("--workers") << request.workers;
    m_args += request.extraArgs;
    QProcess process;
    process.setProgram(kloop);
    process.setArguments(m_args);
    process.setStandardOutputFile(m_log);
    process.setStandardErrorFile(m_log, QIODevice::Append);
    process.setStandardInputFile(QProcess::nullDevice());
    // Detached: the run owns the GPU and its journal and survives the window; the workbench only follows it.
    m_pid = 0;
    if (!process.startDetached(&m_pid))
        return fail(tr("could not start %1: %2").arg(kloop, process.errorString()));
    m_timeoutMs = request.createTimeoutMs;
    m_clock.start();
    m_poll->start();
    return true;
}

void LocalRunLauncher::poll()
{
    const QFileInfo journal(QDir(m_dir).filePath(QStringLiteral("journal.jsonl")));
    if (journal.exists() && journal.size() > 0) {
        m_poll->stop();
        emit sessionCreated(m_dir);
        return;
    }
    if (!processAlive(m_pid)) {
        m_poll->stop();
        emit failed(
            tr("kloop run exited before it created the session %1%2").arg(QDir::toNativeSeparators(m_dir), logTail()));
        return;
    }
    if (m_clock.elapsed() > m_timeoutMs) {
        m_poll->stop();
        emit failed(tr("kloop run (pid %1) did not create %2 within %3 s; its output is in %4")
                        .arg(m_pid)
                        .arg(QDir::toNativeSeparators(m_dir))
                        .arg(m_timeoutMs / 1000)
                        .arg(QDir::toNativeSeparators(m_log)));
    }
}

QString LocalRunLauncher::logTail() const
{
    QFile f(m_log);
    if (!f.open(QIODevice::ReadOnly))
        return {};
    if (f.size() > 2000)
        f.seek(f.size() - 2000);
    const QString text = QString::fromUtf8(f.readAll()).trimmed();
    return text.isEmpty() ? QString() : QStringLiteral(": ") + text;
}

} // namespace kl::app
