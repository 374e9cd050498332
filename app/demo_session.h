#pragma once
#include <QString>
#include <QStringList>
#include <vector>

namespace kl::app {

class MainWindow;
class TimelinePanel;

// A recorded session that ships with KernelLoop, as the start page offers it.
struct BundledDemo {
    QString key; // "rmsnorm", "mla"
    QString title;
    QString summary; // one line: what it shows
    QString dir; // where it is on disk
};

// The bundled recorded sessions this build has, rmsnorm first. Each is looked for in $KL_DEMO_SESSION (rmsnorm) or
// $KL_DEMO_SESSION_MLA, installed next to the binary (../share/kernelloop/<folder>), the source tree's
// resources/<folder>, or the copy embedded in the binary (:/<folder>, extracted once to the cache folder because
// the store reads real files); <folder> is demo-session or demo-session-mla. A demo that is nowhere is left out.
std::vector<BundledDemo> bundledDemos();

// Where the bundled rmsnorm session is (empty when this build has none).
QString demoSessionDir();
// Where the bundled MLA hypothesis session is (empty when this build has none: resources/demo-session-mla/ was
// absent when it was built).
QString mlaDemoSessionDir();

// Whether dir is a bundled recorded session (any of the places the lookups above search, or an extracted copy):
// it opens read-only, so nothing typed in the workbench is appended to the shipped journal.
bool isBundledDemoSession(const QString& dir);

// The traces a session ships in its traces/ folder, in name order (Chrome/Kineto JSON, .kltrace).
QStringList sessionTraces(const QString& sessionDir);
// Opens traces in the timeline one after another, each appended to the ones before (a load cancels one in flight,
// so the next starts when the previous has arrived or failed).
void loadTracesInOrder(TimelinePanel* timeline, const QStringList& traces);

// Opens a bundled session as a new user meets it: replayed at 4x, read-only, its traces in the timeline.
void openBundledDemo(MainWindow& window, const QString& sessionDir);

// Copies a Qt resource folder to a real directory; returns false naming the file that failed.
bool extractResourceDir(const QString& resourceDir, const QString& targetDir, QString* error = nullptr);

} // namespace kl::app
