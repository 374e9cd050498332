#pragma once
// One place for colours, so views, charts and the diff agree and the dark theme is a single switch.
#include "core/candidate.h"

#include <QColor>
#include <QFont>
#include <QIcon>
#include <QString>

class QApplication;

namespace kl::app {

struct Theme {
    bool dark = false;
    QColor window, base, text, mutedText, grid, accent;
    QColor good, bad, warn, info;
    QColor diffAdded, diffRemoved, diffFiller;
    QColor codeKeyword, codeType, codeBuiltin, codeNumber, codeString, codeComment, codePreprocessor, codeAnnotation;
};

enum class ThemeChoice { System, Light, Dark };

ThemeChoice themeChoiceFromString(const QString& s); // "system" / "light" / "dark"
// Decides light or dark (system: the platform palette, GTK_THEME or KL_THEME), installs Fusion with a matching
// palette, and remembers the result for theme().
void applyTheme(QApplication& app, ThemeChoice choice);
const Theme& theme();

QColor statusColor(kl::CandidateStatus s);
QIcon statusIcon(kl::CandidateStatus s); // a small filled dot, cached per status and theme
QFont monospaceFont();

} // namespace kl::app
