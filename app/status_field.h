#pragma once
// A status-bar text that repaints without asking for a new layout. QLabel::setText re-lays out the whole
// main window (docks included) whenever the text width changes, which a replay does many times a second.
#include <QWidget>

namespace kl::app {

class StatusField : public QWidget {
    Q_OBJECT
public:
    explicit StatusField(int minimumChars, QWidget* parent = nullptr);
    void setText(const QString& text);
    QString text() const { return m_text; }
    void clear() { setText(QString()); }
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    QString m_text;
    int m_minimumChars;
};

} // namespace kl::app
