#pragma once
#include <QString>
#include <QStringList>

namespace kl::app {

class MainWindow;

// Which images: every main view of a session (01-10, the README's), or the MLA hypothesis demo's (11-16: its
// hypothesis, the candidate's diff against the template, the review queue, the candidates' verdicts, the
// before/after timelines).
enum class ScreenshotSet { MainViews, MlaDemo };

struct ScreenshotOptions {
    QString outputDir;
    QString sessionDir; // empty: the bundled session (the MLA one for ScreenshotSet::MlaDemo)
    QString tracePath; // empty: the session's traces/ (MainViews: the first one found; MlaDemo: all, in order)
    ScreenshotSet set = ScreenshotSet::MainViews;
    int width = 1600;
    int height = 1000;
    int timeoutMs = 30000;
};

struct ScreenshotResult {
    QStringList files;
    QString error;
};

// Opens the session in `window`, waits until every view has its data, and writes one PNG per view of the set.
ScreenshotResult renderScreenshots(MainWindow& window, const ScreenshotOptions& options);

} // namespace kl::app
