#pragma once
// What the workbench opens when it starts: a session named on the command line; on a machine with a GPU a
// new run of the default problem on that GPU, followed live; without one, the bundled H200 session replayed;
// or the start page when asked. main() and the tests go through the same function.
#include "app/local_run.h"
#include "app/session_worker.h"

#include <QString>

namespace kl::app {

class MainWindow;

struct StartupOptions {
    QString session; // a session directory given on the command line
    OpenMode mode = OpenMode::Writable;
    double speed = 2.0; // replay speed
    QString trace; // a trace to open in the timeline
    bool startPage = false; // --start-page: always the start page
    bool autostart = true; // false (--no-autostart): a GPU machine shows the start page instead of starting a run
    LocalRunRequest run; // what an automatic run runs
};

enum class StartupAction { OpenedSession, StartedLocalRun, FollowedRunningRun, ReplayedDemo, StartPage };

StartupAction startWorkbench(MainWindow& window, const StartupOptions& options);

} // namespace kl::app
