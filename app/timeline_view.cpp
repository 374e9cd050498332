#include "app/timeline_view.h"

#include "app/theme.h"
#include "profiler/analysis.h"

#include <QHelpEvent>
#include <QPainter>
#include <QPainterPath>
#include <QScrollBar>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace kl::app {

namespace {

    QColor colorFor(kl::prof::EventKind kind, std::uint32_t nameId, bool merged)
    {
        const Theme& t = theme();
        QColor c;
        switch (kind) {
        case kl::prof::EventKind::Kernel: {
            // Stable hue per kernel name, in a calm band of blues/greens/purples.
            const int hue = static_cast<int>((nameId * 2654435761u) % 160u) + 150;
            c = QColor::fromHsl(hue % 360, t.dark ? 110 : 120, t.dark ? 110 : 150);
            break;
        }
        case kl::prof::EventKind::Memcpy:
        case kl::prof::EventKind::Memset:
            c = QColor::fromHsl(30, 150, t.dark ? 110 : 150);
            break;
        case kl::prof::EventKind::NvtxRange:
        case kl::prof::EventKind::GpuAnnotation:
        case kl::prof::EventKind::NvtxMark:
            c = QColor::fromHsl(285, 70, t.dark ? 100 : 175);
            break;
        case kl::prof::EventKind::RuntimeApi:
        case kl::prof::EventKind::DriverApi:
            c = QColor::fromHsl(210, 35, t.dark ? 95 : 180);
            break;
        case kl::prof::EventKind::Sync:
            c = QColor::fromHsl(0, 60, t.dark ? 100 : 175);
            break;
        default:
            c = QColor::fromHsl(200, 15, t.dark ? 95 : 185);
            break;
        }
        if (merged)
            c = t.dark ? c.darker(125) : c.darker(112);
        return c;
    }

    double niceStep(double raw)
    {
        const double p = std::pow(10.0, std::floor(std::log10(raw)));
        for (double m : { 1.0, 2.0, 5.0, 10.0 }) {
            if (m * p >= raw)
                return m * p;
        }
        return 10 * p;
    }

    QString nameOf(const kl::prof::Trace& trace, const kl::prof::Event& e)
    {
        const auto v = trace.name(e);
        return QString::fromUtf8(v.data(), static_cast<int>(v.size()));
    }

} // namespace

SelectionStats computeSelectionStats(
    const std::vector<TimelineTrace>& traces, const std::vector<VisualRow>& rows, std::int64_t t0, std::int64_t t1)
{
    SelectionStats s;
    s.t0 = t0;
    s.t1 = t1;
    std::unordered_map<std::string, std::int64_t> kernelTime;
    for (const VisualRow& row : rows) {
        if (!row.visible)
            continue;
        const auto& trace = *traces[row.trace].trace;
        for (std::uint32_t idx : trace.eventsInWindow(row.row, t0, t1)) {
            const auto& e = trace.event(idx);
            ++s.events;
            ++s.byKind[e.kind];
            const std::int64_t clipped = std::max<std::int64_t>(0, std::min(e.end, t1) - std::max(e.start, t0));
            if (kl::prof::isGpuWork(e.kind))
                s.gpuBusyNs += clipped;
            if (e.kind == kl::prof::EventKind::Kernel)
                kernelTime[std::string(trace.name(e))] += clipped;
        }
    }
    s.topKernels.assign(kernelTime.begin(), kernelTime.end());
    std::sort(s.topKernels.begin(), s.topKernels.end(),
        [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
    if (s.topKernels.size() > 8)
        s.topKernels.resize(8);
    return s;
}

QString selectionStatsHtml(const SelectionStats& s)
{
    QString html = QStringLiteral("<b>Selection</b> %1 – %2 (%3)<br>%4 events, GPU busy %5")
                       .arg(formatDurationNs(static_cast<double>(s.t0)), formatDurationNs(static_cast<double>(s.t1)),
                           formatDurationNs(static_cast<double>(s.t1 - s.t0)))
                       .arg(s.events)
                       .arg(formatDurationNs(static_cast<double>(s.gpuBusyNs)));
    QStringList kinds;
    for (const auto& [kind, n] : s.byKind)
        kinds << QStringLiteral("%1 %2").arg(n).arg(QString::fromLatin1(kl::prof::toString(kind)));
    if (!kinds.isEmpty())
        html += QStringLiteral("<br><span>%1</span>").arg(kinds.join(QStringLiteral(", ")));
    if (!s.topKernels.empty()) {
        html += QStringLiteral("<table cellspacing=0 cellpadding=1>");
        for (const auto& [name, ns] : s.topKernels) {
            html += QStringLiteral("<tr><td align=right>%1&nbsp;&nbsp;</td><td><tt>%2</tt></td></tr>")
                        .arg(formatDurationNs(static_cast<double>(ns)),
                            QString::fromStdString(name).left(90).toHtmlEscaped());
        }
        html += QStringLiteral("</table>");
    }
    return html;
}

TimelineView::TimelineView(TraceRowModel* rows, QWidget* parent)
    : QWidget(parent)
    , m_rows(rows)
{
    setObjectName(QStringLiteral("timelineView"));
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
    setAttribute(Qt::WA_OpaquePaintEvent);
    connect(m_rows, &QAbstractItemModel::modelReset, this, [this]() {
        relayout();
        resetView();
    });
    connect(m_rows, &QAbstractItemModel::dataChanged, this, [this]() {
        relayout();
        update();
    });
}

void TimelineView::setVerticalScrollBar(QScrollBar* bar)
{
    m_vbar = bar;
    connect(bar, &QScrollBar::valueChanged, this, qOverload<>(&QWidget::update));
    relayout();
}

int TimelineView::laneHeight() const
{
    return fontMetrics().height() + 6;
}

int TimelineView::plotWidth() const
{
    return std::max(1, width() - kLabelWidth);
}

double TimelineView::fullEnd() const
{
    double end = 0;
    for (const auto& t : m_rows->traces())
        end = std::max(end, static_cast<double>(t.trace->endNs()));
    return std::max(end, 1.0);
}

void TimelineView::relayout()
{
    m_bands.clear();
    int y = 0;
    const auto& rows = m_rows->rows();
    for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
        if (!rows[i].visible)
            continue;
        const int h = rows[i].lanes * laneHeight() + 4;
        m_bands.push_back({ i, y, h });
        y += h + 1;
    }
    m_contentHeight = y;
    if (m_vbar) {
        const int page = std::max(1, height() - kRulerHeight);
        m_vbar->setRange(0, std::max(0, m_contentHeight - page));
        m_vbar->setPageStep(page);
        m_vbar->setSingleStep(laneHeight());
    }
}

void TimelineView::resizeEvent(QResizeEvent* event)
{
    QWidget::resizeEvent(event);
    relayout();
}

void TimelineView::resetView()
{
    setViewRange(0, fullEnd() * 1.01);
}

void TimelineView::setViewRange(double t0, double t1)
{
    const double minSpan = 100.0; // 100 ns: below that there is nothing left to resolve
    if (t1 - t0 < minSpan) {
        const double mid = (t0 + t1) / 2;
        t0 = mid - minSpan / 2;
        t1 = mid + minSpan / 2;
    }
    m_t0 = t0;
    m_t1 = t1;
    update();
    emit viewChanged(m_t0, m_t1);
}

double TimelineView::timeAtX(int x) const
{
    return m_t0 + (x - kLabelWidth) * (m_t1 - m_t0) / plotWidth();
}

int TimelineView::xForTime(double t) const
{
    return kLabelWidth + static_cast<int>(std::floor((t - m_t0) * plotWidth() / (m_t1 - m_t0)));
}

void TimelineView::zoomBy(double factor, double anchorNs)
{
    const double t0 = anchorNs - (anchorNs - m_t0) / factor;
    const double t1 = anchorNs + (m_t1 - anchorNs) / factor;
    setViewRange(t0, t1);
}

void TimelineView::panByPixels(int dx)
{
    const double dt = dx * (m_t1 - m_t0) / plotWidth();
    setViewRange(m_t0 - dt, m_t1 - dt);
}

void TimelineView::selectRange(std::int64_t t0, std::int64_t t1)
{
    m_selT0 = std::min(t0, t1);
    m_selT1 = std::max(t0, t1);
    update();
    if (hasSelection()) {
        startStats();
    } else {
        m_stats.drop();
        emit selectionCleared();
    }
}

void TimelineView::startStats()
{
    const auto traces = m_rows->traces();
    const auto rows = m_rows->rows();
    const std::int64_t t0 = m_selT0, t1 = m_selT1;
    m_stats.start([traces, rows, t0, t1]() { return computeSelectionStats(traces, rows, t0, t1); },
        [this](const SelectionStats& s) {
            if (s.t0 == m_selT0 && s.t1 == m_selT1)
                emit selectionStatsReady(s);
        });
}

void TimelineView::paintEvent(QPaintEvent*)
{
    const Theme& t = theme();
    QPainter p(this);
    p.fillRect(rect(), t.base);
    const int scroll = m_vbar ? m_vbar->value() : 0;
    const int lane = laneHeight();
    const double nsPerPx = (m_t1 - m_t0) / plotWidth();
    const auto& rows = m_rows->rows();
    const auto& traces = m_rows->traces();
    std::size_t items = 0;

    p.setClipRect(QRect(0, kRulerHeight, width(), height() - kRulerHeight));
    for (const Band& band : m_bands) {
        const int top = kRulerHeight + band.top - scroll;
        if (top > height() || top + band.height < kRulerHeight)
            continue;
        const VisualRow& vr = rows[band.visualRow];
        const auto& trace = *traces[vr.trace].trace;
        const auto& row = trace.rows()[vr.row];
        if ((&band - m_bands.data()) % 2 == 1)
            p.fillRect(QRect(kLabelWidth, top, plotWidth(), band.height),
                t.dark ? t.base.lighter(108) : t.window.lighter(102));
        p.setPen(t.grid);
        p.drawLine(0, top + band.height, width(), top + band.height);
        for (int l = 0; l < static_cast<int>(row.lanes.size()); ++l) {
            const int y = top + 2 + l * lane;
            if (y > height() || y + lane < kRulerHeight)
                continue;
            const auto draw = trace.drawItems(vr.row, static_cast<std::uint32_t>(l), static_cast<std::int64_t>(m_t0),
                static_cast<std::int64_t>(std::ceil(m_t1)),
                std::max<std::int64_t>(1, static_cast<std::int64_t>(nsPerPx)));
            items += draw.size();
            for (const auto& item : draw) {
                const auto& e = trace.event(item.event);
                const int x0 = std::max(kLabelWidth, xForTime(static_cast<double>(item.start)));
                const int x1 = std::min(width(), xForTime(static_cast<double>(item.end)) + 1);
                const int w = std::max(1, x1 - x0);
                const bool merged = item.count > 1;
                const QColor fill = colorFor(e.kind, e.name, merged);
                p.fillRect(QRect(x0, y, w, lane - 2), fill);
                if (w > 40 && !merged) {
                    p.setPen(t.dark ? QColor(0xee, 0xee, 0xee) : QColor(0x1a, 0x1a, 0x1a));
                    const QString label = fontMetrics().elidedText(nameOf(trace, e), Qt::ElideRight, w - 6);
                    p.drawText(QRect(x0 + 3, y, w - 6, lane - 2), Qt::AlignVCenter | Qt::AlignLeft, label);
                }
            }
        }
        // Row label column
        p.fillRect(QRect(0, top, kLabelWidth, band.height), t.window);
        p.setPen(vr.gpu ? t.text : t.mutedText);
        QFont f = font();
        f.setBold(vr.gpu);
        p.setFont(f);
        p.drawText(QRect(8, top + 2, kLabelWidth - 12, lane), Qt::AlignVCenter | Qt::AlignLeft,
            fontMetrics().elidedText(vr.name, Qt::ElideMiddle, kLabelWidth - 16));
        p.setFont(font());
    }
    m_lastPaintItems = items;
    p.setClipping(false);

    // Selection overlay
    if (hasSelection()) {
        const int x0 = std::max(kLabelWidth, xForTime(static_cast<double>(m_selT0)));
        const int x1 = std::min(width(), xForTime(static_cast<double>(m_selT1)));
        if (x1 >= x0) {
            QColor sel = t.accent;
            sel.setAlpha(40);
            p.fillRect(QRect(x0, kRulerHeight, std::max(1, x1 - x0), height() - kRulerHeight), sel);
            p.setPen(QPen(t.accent, 1));
            p.drawLine(x0, kRulerHeight, x0, height());
            p.drawLine(x1, kRulerHeight, x1, height());
        }
    }

    // Ruler
    p.fillRect(QRect(0, 0, width(), kRulerHeight), t.window);
    p.setPen(t.grid);
    p.drawLine(0, kRulerHeight - 1, width(), kRulerHeight - 1);
    p.drawLine(kLabelWidth - 1, 0, kLabelWidth - 1, height());
    const double step = niceStep(nsPerPx * 110);
    p.setPen(t.mutedText);
    for (double tick = std::ceil(m_t0 / step) * step; tick <= m_t1; tick += step) {
        const int x = xForTime(tick);
        if (x < kLabelWidth)
            continue;
        p.drawLine(x, kRulerHeight - 6, x, kRulerHeight - 1);
        p.drawText(QRect(x + 3, 0, 110, kRulerHeight - 4), Qt::AlignVCenter | Qt::AlignLeft, formatDurationNs(tick));
    }
    p.setPen(t.text);
    p.drawText(QRect(8, 0, kLabelWidth - 12, kRulerHeight), Qt::AlignVCenter | Qt::AlignLeft,
        m_rows->rows().empty() ? tr("No trace loaded") : tr("span %1").arg(formatDurationNs(m_t1 - m_t0)));
}

void TimelineView::wheelEvent(QWheelEvent* event)
{
    const double steps = event->angleDelta().y() / 120.0;
    if (event->modifiers() & Qt::ShiftModifier) {
        if (m_vbar)
            m_vbar->setValue(m_vbar->value() - static_cast<int>(steps * laneHeight() * 3));
    } else {
        const double anchor = timeAtX(static_cast<int>(event->position().x()));
        zoomBy(std::pow(1.25, steps), anchor);
    }
    event->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* event)
{
    if (event->button() != Qt::LeftButton)
        return;
    m_pressPos = event->pos();
    m_pressT0 = m_t0;
    m_pressT1 = m_t1;
    m_pressScroll = m_vbar ? m_vbar->value() : 0;
    const bool select = (event->modifiers() & Qt::ShiftModifier) || event->pos().y() < kRulerHeight;
    m_drag = select ? Drag::Select : Drag::Pan;
    if (select && event->pos().x() >= kLabelWidth) {
        const auto t = static_cast<std::int64_t>(timeAtX(event->pos().x()));
        m_selT0 = m_selT1 = t;
        update();
    }
    setCursor(select ? Qt::IBeamCursor : Qt::ClosedHandCursor);
}

void TimelineView::mouseMoveEvent(QMouseEvent* event)
{
    if (m_drag == Drag::Pan) {
        const double dt = (event->pos().x() - m_pressPos.x()) * (m_pressT1 - m_pressT0) / plotWidth();
        setViewRange(m_pressT0 - dt, m_pressT1 - dt);
        if (m_vbar)
            m_vbar->setValue(m_pressScroll - (event->pos().y() - m_pressPos.y()));
    } else if (m_drag == Drag::Select) {
        const auto a = static_cast<std::int64_t>(timeAtX(std::max(kLabelWidth, m_pressPos.x())));
        const auto b = static_cast<std::int64_t>(timeAtX(std::max(kLabelWidth, event->pos().x())));
        m_selT0 = std::min(a, b);
        m_selT1 = std::max(a, b);
        update();
    }
}

void TimelineView::mouseReleaseEvent(QMouseEvent* event)
{
    if (m_drag == Drag::Select) {
        if (std::abs(event->pos().x() - m_pressPos.x()) < 3)
            selectRange(0, 0);
        else
            selectRange(m_selT0, m_selT1);
    }
    m_drag = Drag::None;
    unsetCursor();
}

void TimelineView::mouseDoubleClickEvent(QMouseEvent*)
{
    if (hasSelection())
        setViewRange(static_cast<double>(m_selT0), static_cast<double>(m_selT1));
    else
        resetView();
}

void TimelineView::keyPressEvent(QKeyEvent* event)
{
    const double mid = (m_t0 + m_t1) / 2;
    switch (event->key()) {
    case Qt::Key_Plus:
    case Qt::Key_Equal:
        zoomBy(1.5, mid);
        break;
    case Qt::Key_Minus:
        zoomBy(1 / 1.5, mid);
        break;
    case Qt::Key_Left:
        panByPixels(plotWidth() / 8);
        break;
    case Qt::Key_Right:
        panByPixels(-plotWidth() / 8);
        break;
    case Qt::Key_0:
    case Qt::Key_Home:
        resetView();
        break;
    case Qt::Key_Escape:
        selectRange(0, 0);
        break;
    default:
        QWidget::keyPressEvent(event);
    }
}

std::pair<int, int> TimelineView::hitLane(const QPoint& pos) const
{
    if (pos.y() < kRulerHeight || pos.x() < kLabelWidth)
        return { -1, -1 };
    const int y = pos.y() - kRulerHeight + (m_vbar ? m_vbar->value() : 0);
    for (const Band& band : m_bands) {
        if (y >= band.top && y < band.top + band.height) {
            const int lane = (y - band.top - 2) / laneHeight();
            if (lane >= 0 && lane < m_rows->rows()[band.visualRow].lanes)
                return { band.visualRow, lane };
        }
    }
    return { -1, -1 };
}

std::uint32_t TimelineView::eventAt(const QPoint& pos, int* visualRow) const
{
    const auto [vr, lane] = hitLane(pos);
    if (vr < 0)
        return kl::prof::kNone;
    const VisualRow& row = m_rows->rows()[vr];
    const auto& trace = *m_rows->traces()[row.trace].trace;
    const double t = timeAtX(pos.x());
    const double slack = 2 * (m_t1 - m_t0) / plotWidth();
    const auto hits = trace.eventsInWindow(row.row, static_cast<std::uint32_t>(lane),
        static_cast<std::int64_t>(t - slack), static_cast<std::int64_t>(t + slack));
    std::uint32_t best = kl::prof::kNone;
    double bestDist = 1e300;
    for (std::uint32_t idx : hits) {
        const auto& e = trace.event(idx);
        const double d = (t >= e.start && t <= e.end) ? 0 : std::min(std::abs(t - e.start), std::abs(t - e.end));
        if (d < bestDist) {
            bestDist = d;
            best = idx;
        }
    }
    if (visualRow)
        *visualRow = vr;
    return best;
}

QString TimelineView::tooltipAt(const QPoint& pos) const
{
    int vr = -1;
    const std::uint32_t idx = eventAt(pos, &vr);
    if (idx == kl::prof::kNone)
        return {};
    const VisualRow& row = m_rows->rows()[vr];
    const auto& trace = *m_rows->traces()[row.trace].trace;
    const auto& e = trace.event(idx);
    QString tip
        = QStringLiteral("<b>%1</b><br>%2 · %3 · starts at %4")
              .arg(nameOf(trace, e).left(200).toHtmlEscaped(), QString::fromLatin1(kl::prof::toString(e.kind)),
                  formatDurationNs(static_cast<double>(e.duration())), formatDurationNs(static_cast<double>(e.start)));
    if (const auto* k = trace.kernelInfo(e)) {
        tip += QStringLiteral("<br>grid (%1, %2, %3) · block (%4, %5, %6)")
                   .arg(k->grid[0])
                   .arg(k->grid[1])
                   .arg(k->grid[2])
                   .arg(k->block[0])
                   .arg(k->block[1])
                   .arg(k->block[2]);
        tip += QStringLiteral("<br>%1 registers/thread · shared %2 B static + %3 B dynamic")
                   .arg(k->registersPerThread)
                   .arg(k->staticSharedMemory)
                   .arg(k->dynamicSharedMemory);
        if (k->estOccupancyPct >= 0)
            tip += QStringLiteral("<br>est. occupancy %1%").arg(k->estOccupancyPct, 0, 'f', 0);
        // Counters of this very launch (kloop profile --sol): what bounds it, right where the kernel is.
        for (const auto& sol : trace.sol()) {
            if (sol.event != idx)
                continue;
            tip += QStringLiteral("<br>speed of light: DRAM %1% · SM %2% · occupancy %3% · %4")
                       .arg(sol.dramThroughputPct, 0, 'f', 1)
                       .arg(sol.smThroughputPct, 0, 'f', 1)
                       .arg(sol.achievedOccupancyPct, 0, 'f', 1)
                       .arg(
                           QString::fromStdString(kl::prof::rooflineClass(sol.dramThroughputPct, sol.smThroughputPct)));
            break;
        }
    }
    if (const auto* m = trace.memOpInfo(e)) {
        const auto kind = trace.strings().view(m->copyKind);
        tip += QStringLiteral("<br>%1 · %2 bytes")
                   .arg(QString::fromUtf8(kind.data(), static_cast<int>(kind.size())))
                   .arg(m->bytes);
        if (e.duration() > 0)
            tip += QStringLiteral(" · %1 GB/s")
                       .arg(static_cast<double>(m->bytes) / static_cast<double>(e.duration()), 0, 'f', 1);
    }
    tip += QStringLiteral("<br><span style='color:%1'>%2</span>")
               .arg(theme().mutedText.name(), row.name.toHtmlEscaped());
    return tip;
}

bool TimelineView::event(QEvent* event)
{
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const QString tip = tooltipAt(help->pos());
        if (tip.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(help->globalPos(), tip, this);
        return true;
    }
    return QWidget::event(event);
}

} // namespace kl::app
