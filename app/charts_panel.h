#pragma once
// Live charts: latency per evaluation with the best-so-far line, worst correctness error against the
// tolerance (log scale), and per-shape speedup of the selected candidate. Snapshots may arrive at any
// rate; the plots are rebuilt at most every kRefreshMs.
#include "app/app_types.h"

#include <QHash>
#include <QStringList>
#include <QWidget>
#include <optional>

class QCPAbstractPlottable;
class QCustomPlot;
class QTimer;

namespace kl::app {

class ChartsPanel : public QWidget {
    Q_OBJECT
public:
    explicit ChartsPanel(QWidget* parent = nullptr);

    void setSession(const SessionSnapshot& s);
    void setProblem(const std::optional<kl::Problem>& p);
    void setSelectedCandidate(const QString& id);
    void refreshNow(); // rebuild immediately (screenshots, tests)
    void applyTheme();

    QCustomPlot* latencyPlot() const { return m_latency; }
    QCustomPlot* errorPlot() const { return m_error; }
    QCustomPlot* speedupPlot() const { return m_speedup; }
    int rebuildCount() const { return m_rebuilds; }

    static constexpr int kRefreshMs = 200;

signals:
    void candidateClicked(const QString& id); // a point in the latency or correctness chart

private:
    void rebuild();
    void rebuildLatency();
    void rebuildError();
    void rebuildSpeedup();
    void styleAxes(QCustomPlot* plot);

    QCustomPlot* m_latency;
    QCustomPlot* m_error;
    QCustomPlot* m_speedup;
    QTimer* m_timer;
    SessionSnapshot m_session;
    std::optional<double> m_tolerance;
    QString m_selected;
    bool m_dirty = false;
    // Candidate of each point, per plottable, in data order (the charts' x is the evaluation order).
    QHash<const QCPAbstractPlottable*, QStringList> m_pointIds;
    int m_rebuilds = 0;
};

} // namespace kl::app
