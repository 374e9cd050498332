#pragma once
#include <QString>
#include <QStringList>

namespace kl::app {

class MainWindow;

struct ScreenshotOptions {
    QString outputDir;
    QString sessionDir; // empty: the bundled session
    QString tracePath; // empty: the first trace found in the session's traces/ folder, if any
    int width = 1600;
    int height = 1000;
    int timeoutMs = 30000;
};

struct ScreenshotResult {
    QStringList files;
    QString error;
};

// Opens the session in `window`, waits until every view has its data, and writes one PNG per main view.
ScreenshotResult renderScreenshots(MainWindow& window, const ScreenshotOptions& options);

} // namespace kl::app
