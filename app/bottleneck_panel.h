#pragma once
// The bottleneck panel: the profiler's reading of the trace or of the selected range, with a button
// that hands the summary to the hypothesis console, and a "Tune this" link on each operation a catalogue problem
// fits.
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
    QString html() const;
    // What a "Tune this" link asks for (the link's target is "tune:PROBLEM").
    void requestTune(const QString& problem) { emit tuneRequested(problem); }

signals:
    void useAsHypothesis(const QString& summary);
    void tuneRequested(const QString& problem);

private:
    QTextBrowser* m_text;
    QPushButton* m_use;
    QString m_summary;
};

} // namespace kl::app
