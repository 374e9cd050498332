#include "app/charts_panel.h"

#include "app/models/session_metrics.h"
#include "app/qcp.h"
#include "app/theme.h"

#include <QHBoxLayout>
#include <QSplitter>
#include <QTimer>
#include <cmath>

namespace kl::app {

ChartsPanel::ChartsPanel(QWidget* parent)
    : QWidget(parent)
    , m_latency(new QCustomPlot(this))
    , m_error(new QCustomPlot(this))
    , m_speedup(new QCustomPlot(this))
    , m_timer(new QTimer(this))
{
    setObjectName(QStringLiteral("chartsPanel"));
    m_latency->setObjectName(QStringLiteral("latencyPlot"));
    m_error->setObjectName(QStringLiteral("errorPlot"));
    m_speedup->setObjectName(QStringLiteral("speedupPlot"));
    auto* splitter = new QSplitter(Qt::Horizontal, this);
    for (QCustomPlot* plot : { m_latency, m_error, m_speedup }) {
        plot->setMinimumSize(220, 160);
        plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
        plot->axisRect()->setRangeZoom(Qt::Horizontal);
        plot->axisRect()->setRangeDrag(Qt::Horizontal);
        plot->setNoAntialiasingOnDrag(true);
        plot->plotLayout()->insertRow(0);
        // The legend sits in its own row under the axes so it never covers data.
        plot->legend->setVisible(true);
        plot->plotLayout()->addElement(2, 0, plot->legend);
        plot->plotLayout()->setRowStretchFactor(2, 0.001);
        plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
        plot->legend->setWrap(4);
        plot->legend->setIconSize(14, 10);
        plot->legend->setRowSpacing(0);
        plot->legend->setColumnSpacing(10);
        plot->legend->setMargins(QMargins(4, 0, 4, 0));
        plot->legend->setBorderPen(Qt::NoPen);
        splitter->addWidget(plot);
    }
    auto title = [](QCustomPlot* plot, const QString& text) {
        auto* t
            = new QCPTextElement(plot, text, QFont(plot->font().family(), plot->font().pointSize(), QFont::DemiBold));
        plot->plotLayout()->addElement(0, 0, t);
    };
    title(m_latency, tr("Latency per evaluation"));
    title(m_error, tr("Correctness: worst rel. L2 error"));
    title(m_speedup, tr("Speedup per shape"));

    m_error->yAxis->setScaleType(QCPAxis::stLogarithmic);
    m_error->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    m_error->yAxis->setNumberFormat(QStringLiteral("eb"));
    m_error->yAxis->setNumberPrecision(0);

    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(splitter);

    for (QCustomPlot* plot : { m_latency, m_error }) {
        connect(
            plot, &QCustomPlot::plottableClick, this, [this](QCPAbstractPlottable* plottable, int index, QMouseEvent*) {
                const auto it = m_pointIds.constFind(plottable);
                if (it != m_pointIds.constEnd() && index >= 0 && index < it->size())
                    emit candidateClicked(it->at(index));
            });
    }
    m_timer->setInterval(kRefreshMs);
    connect(m_timer, &QTimer::timeout, this, [this]() {
        if (m_dirty)
            rebuild();
    });
    m_timer->start();
    applyTheme();
    rebuild();
}

void ChartsPanel::applyTheme()
{
    for (QCustomPlot* plot : { m_latency, m_error, m_speedup })
        styleAxes(plot);
    m_dirty = true;
}

void ChartsPanel::styleAxes(QCustomPlot* plot)
{
    const Theme& t = theme();
    plot->setBackground(t.base);
    plot->axisRect()->setBackground(t.base);
    for (QCPAxis* axis : { plot->xAxis, plot->yAxis }) {
        axis->setBasePen(QPen(t.mutedText));
        axis->setTickPen(QPen(t.mutedText));
        axis->setSubTickPen(QPen(t.mutedText));
        axis->setTickLabelColor(t.text);
        axis->setLabelColor(t.text);
        axis->grid()->setPen(QPen(t.grid, 1, Qt::SolidLine));
        axis->grid()->setSubGridPen(QPen(t.grid, 1, Qt::DotLine));
        axis->grid()->setZeroLinePen(Qt::NoPen);
    }
    if (plot->plotLayout()->rowCount() > 0) {
        if (auto* title = qobject_cast<QCPTextElement*>(plot->plotLayout()->element(0, 0)))
            title->setTextColor(t.text);
    }
    plot->legend->setBrush(Qt::NoBrush);
    plot->legend->setTextColor(t.text);
}

void ChartsPanel::setSession(const SessionSnapshot& s)
{
    m_session = s;
    m_dirty = true;
}

void ChartsPanel::setProblem(const std::optional<kl::Problem>& p)
{
    m_tolerance = p ? relL2Tolerance(*p) : std::nullopt;
    m_dirty = true;
}

void ChartsPanel::setSelectedCandidate(const QString& id)
{
    if (id == m_selected)
        return;
    m_selected = id;
    // Selection is a direct user action: answer at once rather than on the next tick.
    rebuildSpeedup();
    m_speedup->replot(QCustomPlot::rpQueuedReplot);
}

void ChartsPanel::refreshNow()
{
    rebuild();
    for (QCustomPlot* plot : { m_latency, m_error, m_speedup })
        plot->replot();
}

void ChartsPanel::rebuild()
{
    m_dirty = false;
    ++m_rebuilds;
    rebuildLatency();
    rebuildError();
    rebuildSpeedup();
    for (QCustomPlot* plot : { m_latency, m_error, m_speedup })
        plot->replot(QCustomPlot::rpQueuedReplot);
}

void ChartsPanel::rebuildLatency()
{
    const Theme& t = theme();
    QCustomPlot* plot = m_latency;
    for (int g = 0; g < plot->graphCount(); ++g)
        m_pointIds.remove(plot->graph(g));
    plot->clearGraphs();
    plot->clearItems();
    plot->xAxis->setLabel(tr("evaluation"));
    plot->yAxis->setLabel(tr("latency (µs, geomean over shapes)"));

    QVector<double> accX, accY, otherX, otherY, bestX, bestY;
    QStringList accIds, otherIds;
    std::optional<double> baseline;
    double best = 0;
    if (m_session) {
        int n = 0;
        for (const kl::Evaluation* e : evaluationsInOrder(*m_session)) {
            ++n;
            const auto lat = latencyUs(*e);
            if (!baseline)
                baseline = baselineLatencyUs(*e);
            if (!lat)
                continue;
            const bool accepted = e->verdict == kl::Verdict::Accepted;
            (accepted ? accX : otherX).push_back(n);
            (accepted ? accY : otherY).push_back(*lat);
            (accepted ? accIds : otherIds).push_back(QString::fromStdString(e->candidateId));
            if (accepted && (best == 0 || *lat < best))
                best = *lat;
            if (best > 0) {
                bestX.push_back(n);
                bestY.push_back(best);
            }
        }
        if (n > 0 && best > 0 && bestX.back() != n) {
            bestX.push_back(n);
            bestY.push_back(best);
        }
    }
    // Drawn first so the evaluations lie on top of it and take the clicks.
    auto* bestLine = plot->addGraph();
    bestLine->setName(tr("best so far"));
    bestLine->setLineStyle(QCPGraph::lsStepLeft);
    bestLine->setPen(QPen(t.accent, 2));
    bestLine->setData(bestX, bestY, true);

    auto* others = plot->addGraph();
    others->setName(tr("rejected / flagged"));
    others->setLineStyle(QCPGraph::lsNone);
    others->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCrossCircle, t.mutedText, 6));
    others->setData(otherX, otherY, true);
    m_pointIds.insert(others, otherIds);
    auto* accepted = plot->addGraph();
    accepted->setName(tr("accepted"));
    accepted->setLineStyle(QCPGraph::lsNone);
    accepted->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, t.good, t.good, 6));
    accepted->setData(accX, accY, true);
    m_pointIds.insert(accepted, accIds);
    double maxY = 1;
    for (double y : accY)
        maxY = std::max(maxY, y);
    for (double y : otherY)
        maxY = std::max(maxY, y);
    if (baseline) {
        auto* line = new QCPItemStraightLine(plot);
        line->setSelectable(false);
        line->point1->setCoords(0, *baseline);
        line->point2->setCoords(1, *baseline);
        line->setPen(QPen(t.warn, 1, Qt::DashLine));
        auto* label = new QCPItemText(plot);
        label->setSelectable(false);
        label->position->setType(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(0.99, 0.02);
        label->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
        label->setColor(t.warn);
        label->setText(tr("baseline %1").arg(formatLatency(*baseline)));
        maxY = std::max(maxY, *baseline);
    }
    const int count = static_cast<int>(accX.size() + otherX.size());
    plot->xAxis->setRange(0, std::max(10, count + 1));
    plot->yAxis->setRange(0, maxY * 1.15);
}

void ChartsPanel::rebuildError()
{
    const Theme& t = theme();
    QCustomPlot* plot = m_error;
    for (int g = 0; g < plot->graphCount(); ++g)
        m_pointIds.remove(plot->graph(g));
    plot->clearGraphs();
    plot->clearItems();
    plot->xAxis->setLabel(tr("evaluation"));
    plot->yAxis->setLabel(tr("worst rel. L2 (log)"));
    QVector<double> passX, passY, failX, failY;
    QStringList passIds, failIds;
    double lo = 1e-8, hi = 1;
    bool first = true;
    if (m_session) {
        int n = 0;
        for (const kl::Evaluation* e : evaluationsInOrder(*m_session)) {
            ++n;
            const auto err = worstRelL2(*e);
            if (!err)
                continue;
            // Exact results sit at the bottom of the log axis instead of vanishing.
            const double y = std::max(*err, 1e-12);
            const bool ok = e->correctEverywhere();
            (ok ? passX : failX).push_back(n);
            (ok ? passY : failY).push_back(y);
            (ok ? passIds : failIds).push_back(QString::fromStdString(e->candidateId));
            if (first) {
                lo = hi = y;
                first = false;
            }
            lo = std::min(lo, y);
            hi = std::max(hi, y);
        }
    }
    auto* pass = plot->addGraph();
    pass->setName(tr("correct"));
    pass->setLineStyle(QCPGraph::lsNone);
    pass->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, t.good, t.good, 6));
    pass->setData(passX, passY, true);
    m_pointIds.insert(pass, passIds);
    auto* fail = plot->addGraph();
    fail->setName(tr("wrong"));
    fail->setLineStyle(QCPGraph::lsNone);
    fail->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, QPen(t.bad, 1.5), Qt::NoBrush, 7));
    fail->setData(failX, failY, true);
    m_pointIds.insert(fail, failIds);
    if (m_tolerance) {
        auto* line = new QCPItemStraightLine(plot);
        line->setSelectable(false);
        line->point1->setCoords(0, *m_tolerance);
        line->point2->setCoords(1, *m_tolerance);
        line->setPen(QPen(t.bad, 1, Qt::DashLine));
        auto* label = new QCPItemText(plot);
        label->setSelectable(false);
        // Type before coordinates: changing the type later would keep the pixel position, not the ratio.
        label->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(0.98, *m_tolerance);
        label->setPositionAlignment(Qt::AlignRight | Qt::AlignBottom);
        label->setColor(t.bad);
        label->setText(tr("tolerance %1").arg(*m_tolerance, 0, 'g', 2));
        lo = std::min(lo, *m_tolerance);
        hi = std::max(hi, *m_tolerance);
    }
    const int count = static_cast<int>(passX.size() + failX.size());
    plot->xAxis->setRange(0, std::max(10, count + 1));
    plot->yAxis->setRange(lo / 10, hi * 10);
}

void ChartsPanel::rebuildSpeedup()
{
    const Theme& t = theme();
    QCustomPlot* plot = m_speedup;
    plot->clearPlottables();
    plot->clearItems();
    plot->yAxis->setLabel(tr("speedup over baseline (×)"));
    const kl::Evaluation* eval = nullptr;
    QString id = m_selected;
    if (m_session) {
        if (id.isEmpty()) {
            const auto best = bestCandidate(*m_session);
            if (best)
                id = QString::fromStdString(*best);
        }
        const auto it = m_session->evaluations.find(id.toStdString());
        if (it != m_session->evaluations.end())
            eval = &it->second;
    }
    if (auto* title = qobject_cast<QCPTextElement*>(plot->plotLayout()->element(0, 0)))
        title->setText(id.isEmpty() ? tr("Speedup per shape") : tr("Speedup per shape — %1").arg(id));

    QVector<double> keys, shown, heldOut, lowErr, highErr;
    QVector<double> heldKeys;
    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    double maxY = 1.5;
    if (eval) {
        int k = 0;
        for (const auto& shape : eval->shapes) {
            if (shape.speedup <= 0)
                continue;
            ++k;
            ticker->addTick(
                k, QString::fromStdString(shape.shape.label()).replace(QLatin1Char(','), QLatin1Char('\n')));
            if (shape.heldOut) {
                heldKeys << k;
                heldOut << shape.speedup;
            } else {
                keys << k;
                shown << shape.speedup;
                lowErr << std::max(0.0, shape.speedup - shape.speedupCiLow);
                highErr << std::max(0.0, shape.speedupCiHigh - shape.speedup);
            }
            maxY = std::max(maxY, std::max(shape.speedup, shape.speedupCiHigh));
        }
        plot->xAxis->setRange(0.3, k + 0.7);
    } else {
        plot->xAxis->setRange(0, 4);
    }
    plot->xAxis->setTicker(ticker);
    plot->xAxis->setTickLabelRotation(0);
    plot->xAxis->setLabel(eval ? QString() : tr("select an evaluated candidate"));

    auto* bars = new QCPBars(plot->xAxis, plot->yAxis);
    bars->setName(tr("tuning shapes"));
    bars->setWidth(0.6);
    bars->setPen(Qt::NoPen);
    bars->setBrush(t.accent);
    bars->setData(keys, shown, true);
    if (!keys.isEmpty()) {
        auto* errors = new QCPErrorBars(plot->xAxis, plot->yAxis);
        errors->setDataPlottable(bars);
        errors->setData(lowErr, highErr);
        errors->setPen(QPen(t.text));
        errors->setName(tr("95% CI"));
    }
    auto* held = new QCPBars(plot->xAxis, plot->yAxis);
    held->setName(tr("held-out shapes"));
    held->setWidth(0.6);
    held->setPen(Qt::NoPen);
    held->setBrush(t.info);
    held->setData(heldKeys, heldOut, true);

    auto* one = new QCPItemStraightLine(plot);

    one->setSelectable(false);
    one->point1->setCoords(0, 1.0);
    one->point2->setCoords(1, 1.0);
    one->setPen(QPen(t.mutedText, 1, Qt::DashLine));
    plot->yAxis->setRange(0, maxY * 1.15);
}

} // namespace kl::app
