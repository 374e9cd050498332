#include "app/status_field.h"

#include <QPainter>

namespace kl::app {

StatusField::StatusField(int minimumChars, QWidget* parent)
    : QWidget(parent)
    , m_minimumChars(minimumChars)
{
    setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);
}

void StatusField::setText(const QString& text)
{
    if (text == m_text)
        return;
    m_text = text;
    setToolTip(text);
    update();
}

QSize StatusField::sizeHint() const
{
    return { fontMetrics().averageCharWidth() * m_minimumChars, fontMetrics().height() + 4 };
}

QSize StatusField::minimumSizeHint() const
{
    return { fontMetrics().averageCharWidth() * std::min(m_minimumChars, 12), fontMetrics().height() + 4 };
}

void StatusField::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    p.setPen(palette().color(QPalette::WindowText));
    p.drawText(rect().adjusted(4, 0, -4, 0), Qt::AlignVCenter | Qt::AlignLeft,
        fontMetrics().elidedText(m_text, Qt::ElideRight, width() - 8));
}

} // namespace kl::app
