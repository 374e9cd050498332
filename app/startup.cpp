#include "app/startup.h"

#include "app/demo_session.h"
#include "app/main_window.h"
#include "app/timeline_panel.h"

#include <QDir>

namespace kl::app {

StartupAction startWorkbench(MainWindow& window, const StartupOptions& options)
{
    StartupAction action = StartupAction::StartPage;
    if (!options.session.isEmpty()) {
        window.openSession(options.session, options.mode, options.speed);
        action = StartupAction::OpenedSession;
    } else if (options.startPage) {
        window.showStartPage();
    } else if (localGpuPresent()) {
        // A GPU here: the workbench is for running, so it starts a session on it rather than showing a recording.
        if (options.autostart && window.followRunningLocalRun())
            action = StartupAction::FollowedRunningRun;
        else if (options.autostart && window.startLocalRun(options.run))
            action = StartupAction::StartedLocalRun;
        else
            window.showStartPage();
    } else if (!demoSessionDir().isEmpty()) {
        // No GPU here: land in the recorded H200 session, replayed, so every view is alive.
        window.openSession(demoSessionDir(), OpenMode::Replay, options.speed);
        action = StartupAction::ReplayedDemo;
        // The bundled trace makes the timeline and the bottleneck panel alive too.
        const QDir traces(QDir(demoSessionDir()).filePath(QStringLiteral("traces")));
        const QStringList found
            = traces.entryList({ QStringLiteral("*.json.gz"), QStringLiteral("*.json") }, QDir::Files, QDir::Name);
        if (!found.isEmpty() && options.trace.isEmpty())
            window.timelinePanel()->loadTrace(traces.filePath(found.front()));
    } else {
        window.showStartPage();
    }
    if (!options.trace.isEmpty())
        window.timelinePanel()->loadTrace(options.trace);
    return action;
}

} // namespace kl::app
