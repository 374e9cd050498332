#pragma once
// The bottleneck panel: the profiler's reading of the trace or of the selected range, with a button
// that hands the summary to the hypothesis console.
#include <QWidget>

class QPushButton;
class QTextBrowser;

namespace kl::app {

class BottleneckPanel : public QWidget {
    Q_OBJECT
public:
    explicit BottleneckPanel(QWidget* parent = nullptr);

    void setAnalysis(const QString& html, const QString& summary);
    QString summary() const { return m_summary; }
    QPushButton* useButton() const { return m_use; }

signals:
    void useAsHypothesis(const QString& summary);

private:
    QTextBrowser* m_text;
    QPushButton* m_use;
    QString m_summary;
};

} // namespace kl::app
