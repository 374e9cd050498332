#pragma once
// The timeline: one band per visible trace row (GPU streams first), lanes for nesting, a time ruler.
// Wheel zooms around the cursor, drag pans, Shift+drag (or a drag on the ruler) selects a time range.
// Each paint asks the trace for level-of-detail draw items, so cost follows pixels, not events.
#include "app/latest_job.h"
#include "app/models/trace_row_model.h"

#include <QWidget>
#include <map>

class QScrollBar;

namespace kl::app {

struct SelectionStats {
    std::int64_t t0 = 0;
    std::int64_t t1 = 0;
    std::size_t events = 0;
    std::map<kl::prof::EventKind, std::size_t> byKind;
    std::int64_t gpuBusyNs = 0; // kernel + memory time clipped to the selection, summed over GPU rows
    std::vector<std::pair<std::string, std::int64_t>> topKernels; // clipped time, largest first (at most 8)
};

SelectionStats computeSelectionStats(
    const std::vector<TimelineTrace>& traces, const std::vector<VisualRow>& rows, std::int64_t t0, std::int64_t t1);
QString selectionStatsHtml(const SelectionStats& s);

class TimelineView : public QWidget {
    Q_OBJECT
public:
    explicit TimelineView(TraceRowModel* rows, QWidget* parent = nullptr);

    void setVerticalScrollBar(QScrollBar* bar);
    void resetView(); // whole trace
    void setViewRange(double t0, double t1);
    double viewStart() const { return m_t0; }
    double viewEnd() const { return m_t1; }
    void zoomBy(double factor, double anchorNs); // factor > 1 zooms in
    void panByPixels(int dx);
    void selectRange(std::int64_t t0, std::int64_t t1);
    bool hasSelection() const { return m_selT1 > m_selT0; }
    std::int64_t selectionStart() const { return m_selT0; }
    std::int64_t selectionEnd() const { return m_selT1; }
    QString tooltipAt(const QPoint& pos) const;
    std::size_t lastPaintItems() const { return m_lastPaintItems; }
    double timeAtX(int x) const;
    int xForTime(double t) const;

    QSize sizeHint() const override { return { 900, 320 }; }

signals:
    void selectionStatsReady(const kl::app::SelectionStats& stats);
    void selectionCleared();
    void viewChanged(double t0, double t1);

protected:
    void paintEvent(QPaintEvent* event) override;
    void wheelEvent(QWheelEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    bool event(QEvent* event) override;

private:
    struct Band {
        int visualRow;
        int top;
        int height;
    };
    void relayout();
    int laneHeight() const;
    int plotWidth() const;
    double fullEnd() const;
    void startStats();
    std::pair<int, int> hitLane(const QPoint& pos) const; // (visual row, lane) or (-1, -1)
    std::uint32_t eventAt(const QPoint& pos, int* visualRow) const;

    TraceRowModel* m_rows;
    QScrollBar* m_vbar = nullptr;
    std::vector<Band> m_bands;
    int m_contentHeight = 0;
    double m_t0 = 0;
    double m_t1 = 1;
    std::int64_t m_selT0 = 0;
    std::int64_t m_selT1 = 0;
    enum class Drag { None, Pan, Select } m_drag = Drag::None;
    QPoint m_pressPos;
    double m_pressT0 = 0;
    double m_pressT1 = 0;
    int m_pressScroll = 0;
    std::size_t m_lastPaintItems = 0;
    LatestJob<SelectionStats> m_stats { this };

    static constexpr int kLabelWidth = 220;
    static constexpr int kRulerHeight = 26;
};

} // namespace kl::app
