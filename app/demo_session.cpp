#include "app/demo_session.h"

#include <QCoreApplication>
#include <QCryptographicHash>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>

namespace kl::app {

namespace {

    bool isSessionDir(const QString& dir)
    {
        return QFileInfo::exists(QDir(dir).filePath(QStringLiteral("journal.jsonl")))
            && QFileInfo::exists(QDir(dir).filePath(QStringLiteral("session.json")));
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
    QStringList bundled { demoSessionDir() };
    const QDir appDir(QCoreApplication::applicationDirPath());
    bundled << appDir.absoluteFilePath(QStringLiteral("../share/kernelloop/demo-session"))
            << appDir.absoluteFilePath(QStringLiteral("demo-session"));
#ifdef KL_APP_SOURCE_DIR
    bundled << QStringLiteral(KL_APP_SOURCE_DIR "/resources/demo-session");
#endif
    for (const QString& b : bundled)
        if (!b.isEmpty() && QFileInfo(b).canonicalFilePath() == canonical)
            return true;
    return false;
}

QString demoSessionDir()
{
    QStringList candidates;
    const QByteArray env = qgetenv("KL_DEMO_SESSION");
    if (!env.isEmpty())
        candidates << QString::fromLocal8Bit(env);
    const QDir appDir(QCoreApplication::applicationDirPath());
    candidates << appDir.absoluteFilePath(QStringLiteral("../share/kernelloop/demo-session"))
               << appDir.absoluteFilePath(QStringLiteral("demo-session"));
#ifdef KL_APP_SOURCE_DIR
    candidates << QStringLiteral(KL_APP_SOURCE_DIR "/resources/demo-session");
#endif
    for (const QString& dir : candidates) {
        if (isSessionDir(dir))
            return QDir(dir).absolutePath();
    }
    const QString embedded = QStringLiteral(":/demo-session");
    if (!isSessionDir(embedded))
        return {};
    // Keyed by the journal's hash so a newer build's session never mixes with an older extraction.
    QFile journal(QDir(embedded).filePath(QStringLiteral("journal.jsonl")));
    journal.open(QIODevice::ReadOnly);
    const QString key
        = QString::fromLatin1(QCryptographicHash::hash(journal.readAll(), QCryptographicHash::Sha256).toHex().left(12));
    const QString target = QDir(QStandardPaths::writableLocation(QStandardPaths::CacheLocation))
                               .filePath(QStringLiteral("demo-session-") + key);
    if (isSessionDir(target))
        return target;
    if (!extractResourceDir(embedded, target))
        return {};
    return target;
}

} // namespace kl::app
