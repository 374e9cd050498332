#include "app/theme.h"

#include <QApplication>
#include <QFontDatabase>
#include <QHash>
#include <QPainter>
#include <QPalette>
#include <QPixmap>
#include <QStyleFactory>

namespace kl::app {

namespace {

    Theme makeLight()
    {
        Theme t;
        t.dark = false;
        t.window = QColor(0xf3, 0xf3, 0xf3);
        t.base = QColor(0xff, 0xff, 0xff);
        t.text = QColor(0x20, 0x22, 0x26);
        t.mutedText = QColor(0x6a, 0x70, 0x78);
        t.grid = QColor(0xe2, 0xe4, 0xe8);
        t.accent = QColor(0x2a, 0x6f, 0xdb);
        t.good = QColor(0x2e, 0x9a, 0x4f);
        t.bad = QColor(0xc8, 0x3c, 0x3c);
        t.warn = QColor(0xd0, 0x8a, 0x14);
        t.info = QColor(0x6b, 0x5b, 0xc9);
        t.diffAdded = QColor(0xe3, 0xf6, 0xe6);
        t.diffRemoved = QColor(0xfb, 0xe6, 0xe6);
        t.diffFiller = QColor(0xf0, 0xf1, 0xf3);
        t.codeKeyword = QColor(0x1f, 0x4f, 0xb0);
        t.codeType = QColor(0x0b, 0x7a, 0x75);
        t.codeBuiltin = QColor(0x8a, 0x3f, 0xa8);
        t.codeNumber = QColor(0xa1, 0x5c, 0x08);
        t.codeString = QColor(0x9a, 0x3b, 0x26);
        t.codeComment = QColor(0x70, 0x78, 0x80);
        t.codePreprocessor = QColor(0x7a, 0x5a, 0x14);
        t.codeAnnotation = QColor(0xb0, 0x4a, 0x9b);
        return t;
    }

    Theme makeDark()
    {
        Theme t;
        t.dark = true;
        t.window = QColor(0x25, 0x27, 0x2b);
        t.base = QColor(0x1c, 0x1e, 0x22);
        t.text = QColor(0xdc, 0xdf, 0xe4);
        t.mutedText = QColor(0x8b, 0x92, 0x9c);
        t.grid = QColor(0x34, 0x38, 0x3e);
        t.accent = QColor(0x5a, 0x9b, 0xf5);
        t.good = QColor(0x5c, 0xc2, 0x7a);
        t.bad = QColor(0xe8, 0x6a, 0x6a);
        t.warn = QColor(0xe6, 0xb0, 0x4a);
        t.info = QColor(0xa3, 0x94, 0xf0);
        t.diffAdded = QColor(0x1f, 0x3a, 0x28);
        t.diffRemoved = QColor(0x45, 0x22, 0x26);
        t.diffFiller = QColor(0x2a, 0x2c, 0x31);
        t.codeKeyword = QColor(0x7a, 0xa7, 0xf5);
        t.codeType = QColor(0x56, 0xc8, 0xc0);
        t.codeBuiltin = QColor(0xc7, 0x92, 0xea);
        t.codeNumber = QColor(0xf0, 0xa8, 0x60);
        t.codeString = QColor(0xe0, 0x8e, 0x79);
        t.codeComment = QColor(0x7f, 0x87, 0x91);
        t.codePreprocessor = QColor(0xd8, 0xb8, 0x6a);
        t.codeAnnotation = QColor(0xe0, 0x84, 0xc8);
        return t;
    }

    Theme& current()
    {
        static Theme t = makeLight();
        return t;
    }

    bool systemPrefersDark()
    {
        const QByteArray forced = qgetenv("KL_THEME").toLower();
        if (forced == "dark")
            return true;
        if (forced == "light")
            return false;
        // Qt 6.4 has no colour-scheme hint; GTK's variable and the platform palette are what it can see.
        if (qgetenv("GTK_THEME").toLower().contains(":dark"))
            return true;
        const QColor window = QGuiApplication::palette().color(QPalette::Window);
        return window.lightness() < 110;
    }

    QPalette paletteFor(const Theme& t)
    {
        QPalette p;
        p.setColor(QPalette::Window, t.window);
        p.setColor(QPalette::WindowText, t.text);
        p.setColor(QPalette::Base, t.base);
        p.setColor(QPalette::AlternateBase, t.dark ? t.window : QColor(0xf8, 0xf9, 0xfa));
        p.setColor(QPalette::ToolTipBase, t.base);
        p.setColor(QPalette::ToolTipText, t.text);
        p.setColor(QPalette::PlaceholderText, t.mutedText);
        p.setColor(QPalette::Text, t.text);
        p.setColor(QPalette::Button, t.window);
        p.setColor(QPalette::ButtonText, t.text);
        p.setColor(QPalette::BrightText, t.bad);
        p.setColor(QPalette::Highlight, t.accent);
        p.setColor(QPalette::HighlightedText, Qt::white);
        p.setColor(QPalette::Link, t.accent);
        p.setColor(QPalette::Mid, t.grid);
        p.setColor(QPalette::Midlight, t.dark ? t.window.lighter(115) : t.window.lighter(103));
        p.setColor(QPalette::Dark, t.dark ? t.base.darker(130) : t.window.darker(140));
        p.setColor(QPalette::Shadow, t.dark ? QColor(0, 0, 0) : t.window.darker(180));
        p.setColor(QPalette::Disabled, QPalette::Text, t.mutedText);
        p.setColor(QPalette::Disabled, QPalette::WindowText, t.mutedText);
        p.setColor(QPalette::Disabled, QPalette::ButtonText, t.mutedText);
        return p;
    }

} // namespace

ThemeChoice themeChoiceFromString(const QString& s)
{
    if (s.compare(QLatin1String("dark"), Qt::CaseInsensitive) == 0)
        return ThemeChoice::Dark;
    if (s.compare(QLatin1String("light"), Qt::CaseInsensitive) == 0)
        return ThemeChoice::Light;
    return ThemeChoice::System;
}

void applyTheme(QApplication& app, ThemeChoice choice)
{
    bool dark = false;
    switch (choice) {
    case ThemeChoice::Light:
        dark = false;
        break;
    case ThemeChoice::Dark:
        dark = true;
        break;
    case ThemeChoice::System:
        dark = systemPrefersDark();
        break;
    }
    current() = dark ? makeDark() : makeLight();
    app.setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
    app.setPalette(paletteFor(current()));
}

const Theme& theme()
{
    return current();
}

QColor statusColor(kl::CandidateStatus s)
{
    const Theme& t = theme();
    switch (s) {
    case kl::CandidateStatus::Accepted:
        return t.good;
    case kl::CandidateStatus::Rejected:
    case kl::CandidateStatus::CompileFailed:
    case kl::CandidateStatus::Crashed:
    case kl::CandidateStatus::TimedOut:
        return t.bad;
    case kl::CandidateStatus::PendingReview:
        return t.warn;
    case kl::CandidateStatus::Compiling:
    case kl::CandidateStatus::Verifying:
    case kl::CandidateStatus::Timing:
        return t.accent;
    case kl::CandidateStatus::Approved:
        return t.info;
    case kl::CandidateStatus::Proposed:
        return t.mutedText;
    }
    return t.mutedText;
}

QIcon statusIcon(kl::CandidateStatus s)
{
    static QHash<int, QIcon> cache;
    const int key = static_cast<int>(s) * 2 + (theme().dark ? 1 : 0);
    auto it = cache.find(key);
    if (it != cache.end())
        return *it;
    QIcon icon;
    for (int size : { 12, 16, 24, 32 }) {
        QPixmap pm(size, size);
        pm.fill(Qt::transparent);
        QPainter p(&pm);
        p.setRenderHint(QPainter::Antialiasing);
        p.setPen(Qt::NoPen);
        p.setBrush(statusColor(s));
        const qreal r = size * 0.3;
        p.drawEllipse(QPointF(size / 2.0, size / 2.0), r, r);
        icon.addPixmap(pm);
    }
    cache.insert(key, icon);
    return icon;
}

QFont monospaceFont()
{
    QFont f = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    f.setStyleHint(QFont::Monospace);
    return f;
}

} // namespace kl::app
