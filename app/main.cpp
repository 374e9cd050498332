// kernelloop: the KernelLoop workbench.
#include "app/demo_session.h"
#include "app/main_window.h"
#include "app/screenshot.h"
#include "app/startup.h"
#include "app/theme.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QSettings>
#include <QTemporaryDir>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

bool hasArg(int argc, char** argv, const char* name)
{
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], name) == 0 || std::strncmp(argv[i], name, std::strlen(name)) == 0)
            return true;
    }
    return false;
}

// Qt aborts with a terse plugin error when it has no display; say what to do instead.
bool displayAvailable(int argc, char** argv)
{
#ifdef Q_OS_LINUX
    if (hasArg(argc, argv, "-platform") || hasArg(argc, argv, "--platform"))
        return true;
    const QByteArray platform = qgetenv("QT_QPA_PLATFORM");
    const bool x11 = !qgetenv("DISPLAY").isEmpty();
    const bool wayland = !qgetenv("WAYLAND_DISPLAY").isEmpty();
    if (platform.isEmpty())
        return x11 || wayland;
    if (platform.startsWith("xcb"))
        return x11;
    if (platform.startsWith("wayland"))
        return wayland;
    return true; // offscreen, minimal, vnc, eglfs, linuxfb: no display server needed
#else
    (void)argc;
    (void)argv;
    return true;
#endif
}

QtMessageHandler g_defaultHandler = nullptr;

// The offscreen platform warns once per window about size hints it cannot pass on; that is expected there.
void quietOffscreenHandler(QtMsgType type, const QMessageLogContext& context, const QString& message)
{
    if (message.startsWith(QLatin1String("This plugin does not support propagateSizeHints")))
        return;
    g_defaultHandler(type, context, message);
}

} // namespace

int main(int argc, char** argv)
{
    g_defaultHandler = qInstallMessageHandler(quietOffscreenHandler);
    const bool screenshot = hasArg(argc, argv, "--screenshot");
    const bool wantsHelp = hasArg(argc, argv, "--help") || hasArg(argc, argv, "-h") || hasArg(argc, argv, "--version");
    if (screenshot && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    if (wantsHelp && !displayAvailable(argc, argv))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    if (!displayAvailable(argc, argv)) {
        std::fprintf(stderr,
            "kernelloop: no display found (DISPLAY and WAYLAND_DISPLAY are unset), so the workbench cannot "
            "open a window.\n"
            "  On this machine use the command-line tool instead:\n"
            "      kloop --help                 all commands\n"
            "      kloop session show DIR       a session's candidates and results\n"
            "      kloop session diff DIR A B   the diff between two candidates\n"
            "  Or render the workbench's views to PNG files:  kernelloop --screenshot OUT_DIR [SESSION]\n"
            "  Or run it on a virtual display:                xvfb-run -a kernelloop\n");
        return 2;
    }

    QApplication::setHighDpiScaleFactorRoundingPolicy(Qt::HighDpiScaleFactorRoundingPolicy::PassThrough);
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("KernelLoop"));
    QApplication::setApplicationName(QStringLiteral("kernelloop"));
    QApplication::setApplicationVersion(QStringLiteral(KL_APP_VERSION));

    QCommandLineParser parser;
    parser.setApplicationDescription(
        QStringLiteral("KernelLoop workbench: candidate tree, diffs, live charts, review queue, timeline."));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument(QStringLiteral("session"), QStringLiteral("A session directory to open."));
    QCommandLineOption replay(QStringLiteral("replay"), QStringLiteral("Replay the session with its recorded timing."));
    QCommandLineOption speed(QStringLiteral("speed"), QStringLiteral("Replay speed factor (0: as fast as possible)."),
        QStringLiteral("factor"), QStringLiteral("2"));
    QCommandLineOption follow(
        QStringLiteral("follow"), QStringLiteral("Follow a session that kloop run is writing (read-only, live)."));
    QCommandLineOption readOnly(QStringLiteral("read-only"), QStringLiteral("Open the session without writing to it."));
    QCommandLineOption trace(
        QStringLiteral("trace"), QStringLiteral("Open a trace in the timeline."), QStringLiteral("file"));
    QCommandLineOption shots(QStringLiteral("screenshot"),
        QStringLiteral("Render each main view to PNG files in DIR (offscreen) and exit."), QStringLiteral("dir"));
    QCommandLineOption shotSet(QStringLiteral("screenshot-set"),
        QStringLiteral("With --screenshot: main (every main view, 01-10) or mla (the bundled MLA hypothesis "
                       "session's hypothesis, diff, review, verdicts and timelines, 11-16)."),
        QStringLiteral("set"), QStringLiteral("main"));
    QCommandLineOption themeOpt(QStringLiteral("theme"), QStringLiteral("system, light or dark."),
        QStringLiteral("name"), QStringLiteral("system"));
    QCommandLineOption startPage(
        QStringLiteral("start-page"), QStringLiteral("Show the start page instead of the bundled session."));
    QCommandLineOption noAutostart(QStringLiteral("no-autostart"),
        QStringLiteral("On a machine with a GPU, show the start page instead of starting a session on it."));
    QCommandLineOption problemOpt(QStringLiteral("problem"),
        QStringLiteral("The problem a session started on this machine's GPU tunes."), QStringLiteral("name"),
        QStringLiteral("rmsnorm"));
    QCommandLineOption agentOpt(QStringLiteral("agent"),
        QStringLiteral("The agent of a session started on this machine's GPU (as kloop run --agent)."),
        QStringLiteral("spec"), QStringLiteral("tuner:bayes"));
    parser.addOptions({ replay, speed, follow, readOnly, trace, shots, shotSet, themeOpt, startPage, noAutostart,
        problemOpt, agentOpt });
    parser.process(app);

    QTemporaryDir screenshotSettings;
    if (parser.isSet(shots)) {
        // Screenshots are reproducible and leave no trace: no recent sessions of this user, nothing written back.
        QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, screenshotSettings.path());
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, screenshotSettings.path());
    }
    kl::app::applyTheme(app, kl::app::themeChoiceFromString(parser.value(themeOpt)));
    kl::app::MainWindow window;
    const QStringList positional = parser.positionalArguments();
    const QString session = positional.isEmpty() ? QString() : QFileInfo(positional.front()).absoluteFilePath();

    if (parser.isSet(shots)) {
        kl::app::ScreenshotOptions options;
        options.outputDir = parser.value(shots);
        options.sessionDir = session;
        options.tracePath = parser.value(trace);
        if (parser.value(shotSet) == QLatin1String("mla")) {
            options.set = kl::app::ScreenshotSet::MlaDemo;
        } else if (parser.value(shotSet) != QLatin1String("main")) {
            std::fprintf(
                stderr, "kernelloop: --screenshot-set is main or mla, got '%s'\n", qPrintable(parser.value(shotSet)));
            return 2;
        }
        const auto result = kl::app::renderScreenshots(window, options);
        for (const QString& f : result.files)
            std::printf("%s\n", qPrintable(f));
        if (!result.error.isEmpty()) {
            std::fprintf(stderr, "kernelloop --screenshot: %s\n", qPrintable(result.error));
            return 1;
        }
        return 0;
    }

    window.restoreLayout();
    window.show();
    kl::app::StartupOptions startup;
    startup.session = session;
    if (parser.isSet(replay))
        startup.mode = kl::app::OpenMode::Replay;
    else if (parser.isSet(follow))
        startup.mode = kl::app::OpenMode::Follow;
    else if (!session.isEmpty() && (parser.isSet(readOnly) || !QFileInfo(session).isWritable()))
        startup.mode = kl::app::OpenMode::Load;
    startup.speed = parser.value(speed).toDouble();
    startup.trace = parser.value(trace);
    startup.startPage = parser.isSet(startPage);
    startup.autostart = !parser.isSet(noAutostart);
    startup.run.problem = parser.value(problemOpt);
    startup.run.agent = parser.value(agentOpt);
    kl::app::startWorkbench(window, startup);
    return app.exec();
}
