// GUI tests run headless: offscreen unless the caller chose a platform (e.g. xcb under xvfb-run).
#include "app/theme.h"
#include "dispatch_latency.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QStandardPaths>
#include <cstdio>
#include <gtest/gtest.h>

namespace {

// Times every event the GUI thread dispatches while a DispatchLatencyRecorder is alive; with KL_GUI_STALLS set,
// also names every event that keeps the GUI thread busy for more than 15 ms.
class TimingApplication : public QApplication {
public:
    using QApplication::QApplication;
    bool notify(QObject* receiver, QEvent* event) override
    {
        if (!m_report)
            return kl::test::DispatchLatencyRecorder::timedNotify(receiver, event, &deliver, this);
        QElapsedTimer t;
        t.start();
        const int type = event->type();
        const bool r = kl::test::DispatchLatencyRecorder::timedNotify(receiver, event, &deliver, this);
        if (t.elapsed() > 15)
            std::printf("[ slow event ] %lld ms type %d to %s %s\n", static_cast<long long>(t.elapsed()), type,
                receiver->metaObject()->className(), qPrintable(receiver->objectName()));
        return r;
    }

private:
    static bool deliver(QObject* receiver, QEvent* event, void* self)
    {
        return static_cast<TimingApplication*>(self)->QApplication::notify(receiver, event);
    }
    bool m_report = qEnvironmentVariableIsSet("KL_GUI_STALLS");
};

QtMessageHandler g_defaultHandler = nullptr;

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
    if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication::setAttribute(Qt::AA_Use96Dpi, true);
    TimingApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("KernelLoopTests"));
    QApplication::setApplicationName(QStringLiteral("kl_gui_tests"));
    // Settings and caches go to a throw-away location, never the user's.
    QStandardPaths::setTestModeEnabled(true);
    kl::app::applyTheme(app, kl::app::ThemeChoice::Light);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
