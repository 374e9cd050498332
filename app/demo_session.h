#pragma once
#include <QString>

namespace kl::app {

// Where the bundled recorded session is: $KL_DEMO_SESSION, installed next to the binary
// (../share/kernelloop/demo-session), the source tree's resources/demo-session, or the copy embedded in
// the binary (:/demo-session, extracted once to the cache folder because the store reads real files).
// Empty when this build has none.
QString demoSessionDir();

// Whether dir is the bundled recorded session (any of the places demoSessionDir() looks, or its extracted copy):
// it opens read-only, so nothing typed in the workbench is appended to the shipped journal.
bool isBundledDemoSession(const QString& dir);

// Copies a Qt resource folder to a real directory; returns false naming the file that failed.
bool extractResourceDir(const QString& resourceDir, const QString& targetDir, QString* error = nullptr);

} // namespace kl::app
