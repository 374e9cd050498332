#include "app/demo_session.h"

#include "app/main_window.h"
#include "app/timeline_panel.h"

#include <QCoreApplication>
#include <QCryptographicHash>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QPointer>
#include <QStandardPaths>
#include <memory>

namespace kl::app {

namespace {

    bool isSessionDir(const QString& dir)
    {
        return QFileInfo::exists(QDir(dir).filePath(QStringLiteral("journal.jsonl")))
            && QFileInfo::exists(QDir(dir).filePath(QStringLiteral("session.json")));
    }

    // A bundled session: its folder under resources/ (and share/kernelloop/, and the embedded :/<folder>) and the
    // environment variable that points elsewhere.
    struct DemoPlace {
        const char* key;
        const char* folder;
        const char* env;
    };
    constexpr DemoPlace kRmsnorm { "rmsnorm", "demo-session", "KL_DEMO_SESSION" };
    constexpr DemoPlace kMla { "mla", "demo-session-mla", "KL_DEMO_SESSION_MLA" };

    // Where a bundled session may be on disk, in the order they are tried.
    QStringList placesOnDisk(const DemoPlace& place)
    {
        QStringList out;
        const QByteArray env = qgetenv(place.env);
        if (!env.isEmpty())
            out << QString::fromLocal8Bit(env);
        const QString folder = QString::fromLatin1(place.folder);
        const QDir appDir(QCoreApplication::applicationDirPath());
        out << appDir.absoluteFilePath(QStringLiteral("../share/kernelloop/") + folder)
            << appDir.absoluteFilePath(folder);
#ifdef KL_APP_SOURCE_DIR
        out << QStringLiteral(KL_APP_SOURCE_DIR "/resources/") + folder;
#endif
        return out;
    }

    QString findDemo(const DemoPlace& place)
    {
        for (const QString& dir : placesOnDisk(place)) {
            if (isSessionDir(dir))
                return QDir(dir).absolutePath();
        }
        const QString embedded = QStringLiteral(":/") + QString::fromLatin1(place.folder);
        if (!isSessionDir(embedded))
            return {};
        // Keyed by the journal's hash so a newer build's session never mixes with an older extraction.
        QFile journal(QDir(embedded).filePath(QStringLiteral("journal.jsonl")));
        journal.open(QIODevice::ReadOnly);
        const QString key = QString::fromLatin1(
            QCryptographicHash::hash(journal.readAll(), QCryptographicHash::Sha256).toHex().left(12));
        const QString target = QDir(QStandardPaths::writableLocation(QStandardPaths::CacheLocation))
                                   .filePath(QString::fromLatin1(place.folder) + QLatin1Char('-') + key);
        if (isSessionDir(target))
            return target;
        if (!extractResourceDir(embedded, target))
            return {};
        return target;
    }

} // namespace

bool extractResourceDir(const QString& resourceDir, const QString& targetDir, QString* error)
{
    QDirIterator it(resourceDir, QDir::Files, QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QString source = it.next();
        const QString relative = QDir(resourceDir).relativeFilePath(source);
        const QString target = QDir(targetDir).filePath(relative);
        QDir().mkpath(QFileInfo(target).absolutePath());
        QFile::remove(target);
        if (!QFile::copy(source, target)) {
            if (error)
                *error = QStringLiteral("could not write %1").arg(target);
            return false;
        }
        QFile::setPermissions(target, QFile::ReadOwner | QFile::WriteOwner | QFile::ReadGroup | QFile::ReadOther);
    }
    return true;
}

bool isBundledDemoSession(const QString& dir)
{
    const QString canonical = QFileInfo(dir).canonicalFilePath();
    if (canonical.isEmpty())
        return false;
    for (const DemoPlace& place : { kRmsnorm, kMla }) {
        const QStringList bundled = QStringList { findDemo(place) } + placesOnDisk(place);
        for (const QString& b : bundled)
            if (!b.isEmpty() && QFileInfo(b).canonicalFilePath() == canonical)
                return true;
    }
    return false;
}

QString demoSessionDir()
{
    return findDemo(kRmsnorm);
}

QString mlaDemoSessionDir()
{
    return findDemo(kMla);
}

std::vector<BundledDemo> bundledDemos()
{
    std::vector<BundledDemo> out;
    if (const QString dir = demoSessionDir(); !dir.isEmpty())
        out.push_back(
            { QString::fromLatin1(kRmsnorm.key), QCoreApplication::translate("kl", "RMSNorm, tuned on an H200"),
                QCoreApplication::translate("kl", "The tuner alone searches the RMSNorm template's parameters"), dir });
    if (const QString dir = mlaDemoSessionDir(); !dir.isEmpty())
        out.push_back({ QString::fromLatin1(kMla.key),
            QCoreApplication::translate("kl", "DeepSeek MLA decode: the engineer's hypothesis wins"),
            QCoreApplication::translate("kl",
                "Profile, hypothesis (share each KV block across all 128 heads, pipeline its loads), candidate, "
                "review, then the tuner"),
            dir });
    return out;
}

QStringList sessionTraces(const QString& sessionDir)
{
    const QDir traces(QDir(sessionDir).filePath(QStringLiteral("traces")));
    QStringList out;
    for (const QString& name :
        traces.entryList({ QStringLiteral("*.json.gz"), QStringLiteral("*.json"), QStringLiteral("*.kltrace") },
            QDir::Files, QDir::Name))
        out << traces.filePath(name);
    return out;
}

void loadTracesInOrder(TimelinePanel* timeline, const QStringList& traces)
{
    if (!timeline || traces.isEmpty())
        return;
    auto* guard = new QObject(timeline);
    auto next = std::make_shared<int>(0);
    const QPointer<TimelinePanel> panel(timeline);
    auto loadNext = [guard, next, panel, traces]() {
        if (!panel || *next >= traces.size()) {
            guard->deleteLater();
            return;
        }
        const int i = (*next)++;
        panel->loadTrace(traces.at(i), i > 0);
    };
    // Queued: the next load starts after the panel has finished handling the one that arrived.
    QObject::connect(timeline, &TimelinePanel::traceLoaded, guard, loadNext, Qt::QueuedConnection);
    QObject::connect(timeline, &TimelinePanel::loadFailed, guard, loadNext, Qt::QueuedConnection);
    loadNext();
}

void openBundledDemo(MainWindow& window, const QString& sessionDir)
{
    window.openSession(sessionDir, OpenMode::Replay, 4.0);
    loadTracesInOrder(window.timelinePanel(), sessionTraces(sessionDir));
}

} // namespace kl::app
