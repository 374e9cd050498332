#include "app/pipeline_panel.h"

#include "app/models/pipeline_stage_model.h"
#include "core/errors.h"
#include "core/json_fields.h"

#include <QComboBox>
#include <QHeaderView>
#include <QLabel>
#include <QPainter>
#include <QTableView>
#include <QVBoxLayout>

namespace kl::app {

namespace {
    QString percent(double x)
    {
        return QStringLiteral("%1%").arg(100.0 * x, 0, 'f', 1);
    }
} // namespace

StageStrip::StageStrip(PipelineStageModel* model, QWidget* parent)
    : QWidget(parent)
    , m_model(model)
{
    setMinimumHeight(36);
    connect(m_model, &QAbstractItemModel::modelReset, this, qOverload<>(&QWidget::update));
    connect(m_model, &QAbstractItemModel::dataChanged, this, qOverload<>(&QWidget::update));
}

QSize StageStrip::sizeHint() const
{
    return { 600, 44 };
}

QRectF StageStrip::stageRect(int row) const
{
    const int n = m_model->rowCount();
    if (row < 0 || row >= n)
        return {};
    double total = 0;
    for (int r = 0; r < n; ++r)
        total += m_model->index(r, 0).data(PipelineStageModel::ShareRole).toDouble();
    // Without times (nothing measured) every stage gets the same width.
    auto width = [&](int r) {
        return total > 0 ? m_model->index(r, 0).data(PipelineStageModel::ShareRole).toDouble() / total : 1.0 / n;
    };
    double x = 0;
    for (int r = 0; r < row; ++r)
        x += width(r);
    const QRectF area = QRectF(rect()).adjusted(1, 1, -1, -1);
    return { area.left() + x * area.width(), area.top(), width(row) * area.width(), area.height() };
}

void StageStrip::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    const QColor candidate = palette().color(QPalette::Highlight);
    const QColor baseline = palette().color(QPalette::Mid);
    const QColor failed(0xc6, 0x28, 0x28);
    for (int r = 0; r < m_model->rowCount(); ++r) {
        const QModelIndex i = m_model->index(r, 0);
        const QRectF box = stageRect(r);
        QColor fill = i.data(PipelineStageModel::DiffersRole).toBool() ? candidate : baseline;
        if (i.data(PipelineStageModel::FailedRole).toBool())
            fill = failed;
        p.fillRect(box.adjusted(0, 0, -1, 0), fill);
        p.setPen(palette().color(QPalette::HighlightedText));
        const QString label = i.data().toString() + QStringLiteral(" ")
            + m_model->index(r, PipelineStageModel::ShareColumn).data().toString();
        p.drawText(box.adjusted(3, 0, -3, 0), Qt::AlignVCenter | Qt::AlignLeft,
            fontMetrics().elidedText(label, Qt::ElideRight, static_cast<int>(box.width()) - 6));
    }
}

PipelinePanel::PipelinePanel(QWidget* parent)
    : QWidget(parent)
    , m_model(new PipelineStageModel(this))
    , m_strip(new StageStrip(m_model, this))
    , m_shapes(new QComboBox(this))
    , m_title(new QLabel(this))
    , m_summary(new QLabel(this))
    , m_graphCheck(new QLabel(this))
    , m_budgets(new QLabel(this))
    , m_verdict(new QLabel(this))
    , m_error(new QLabel(this))
    , m_view(new QTableView(this))
{
    auto* layout = new QVBoxLayout(this);
    auto* top = new QHBoxLayout;
    top->addWidget(m_title, 1);
    top->addWidget(m_shapes);
    layout->addLayout(top);
    layout->addWidget(m_strip);
    for (auto* l : { m_summary, m_graphCheck, m_budgets, m_verdict, m_error }) {
        l->setWordWrap(true);
        l->setTextInteractionFlags(Qt::TextSelectableByMouse);
        layout->addWidget(l);
    }
    m_error->setStyleSheet(QStringLiteral("color: #c62828"));
    m_error->hide();
    m_view->setModel(m_model);
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_view->verticalHeader()->hide();
    layout->addWidget(m_view, 1);
    m_title->setText(tr("No pipeline result open"));
    connect(m_shapes, &QComboBox::currentIndexChanged, this, &PipelinePanel::selectShape);
}

bool PipelinePanel::loadFile(const QString& path)
{
    try {
        const kl::Json j = kl::jsonfield::readJsonFile(path.toStdString(), 64u << 20);
        setResult(kl::pipelineResultFromJson(j, path.toStdString()));
        return true;
    } catch (const std::exception& e) {
        m_error->setText(QString::fromStdString(e.what()));
        m_error->show();
        return false;
    }
}

void PipelinePanel::setResult(kl::PipelineResult result)
{
    m_result = std::move(result);
    m_error->hide();
    m_title->setText(
        tr("Pipeline %1 on %2")
            .arg(QString::fromStdString(m_result.pipeline),
                m_result.device.name.empty() ? tr("an unnamed device") : QString::fromStdString(m_result.device.name)));
    QStringList reasons;
    for (const auto& r : m_result.reasons)
        reasons << QStringLiteral("%1: %2").arg(QString::fromStdString(r.rule), QString::fromStdString(r.message));
    m_verdict->setText(m_result.accepted ? tr("Accepted") : tr("Rejected: %1").arg(reasons.join(QStringLiteral("; "))));
    const QSignalBlocker block(m_shapes);
    m_shapes->clear();
    for (const auto& s : m_result.shapes)
        m_shapes->addItem(QString::fromStdString(s.shape.label()));
    selectShape(m_result.shapes.empty() ? -1 : 0);
}

void PipelinePanel::selectShape(int index)
{
    if (index < 0 || index >= static_cast<int>(m_result.shapes.size())) {
        m_model->setStages({});
        m_summary->clear();
        m_graphCheck->clear();
        m_budgets->clear();
        return;
    }
    if (m_shapes->currentIndex() != index) {
        const QSignalBlocker block(m_shapes);
        m_shapes->setCurrentIndex(index);
    }
    const kl::PipelineShapeResult& s = m_result.shapes[static_cast<std::size_t>(index)];
    m_model->setStages(s.stages);
    const auto& pipeline = s.graph ? s.graph : s.eager;
    const auto& baseline = s.graph ? s.baselineGraph : s.baselineEager;
    QString text;
    if (pipeline && baseline)
        text = tr("End to end (%1): %2 us vs %3 us all-baseline, %4x [%5, %6]")
                   .arg(s.graph ? tr("one CUDA graph") : tr("eager, no graph"))
                   .arg(pipeline->medianUs, 0, 'f', 2)
                   .arg(baseline->medianUs, 0, 'f', 2)
                   .arg(s.speedup, 0, 'f', 3)
                   .arg(s.speedupCiLow, 0, 'f', 3)
                   .arg(s.speedupCiHigh, 0, 'f', 3);
    else
        text = tr("End to end: not timed");
    if (s.graph && (m_result.peaks.flopsPerSecond > 0 || m_result.peaks.bytesPerSecond > 0))
        text += tr(" · MFU %1 · MBU %2 (of %3 TFLOP/s, %4 TB/s measured)")
                    .arg(percent(s.mfu), percent(s.mbu))
                    .arg(m_result.peaks.flopsPerSecond / 1e12, 0, 'f', 0)
                    .arg(m_result.peaks.bytesPerSecond / 1e12, 0, 'f', 2);
    m_summary->setText(text);
    QStringList checks;
    for (const auto& c : s.checks)
        checks << QStringLiteral("%1 %2").arg(
            QString::fromStdString(c.distribution), c.passed ? tr("passes") : tr("wrong"));
    QString graph;
    if (s.graph && s.eager)
        graph = tr("Graph vs eager: %1 us under the graph, %2 us eager; eager speedup %3x")
                    .arg(s.graph->medianUs, 0, 'f', 2)
                    .arg(s.eager->medianUs, 0, 'f', 2)
                    .arg(s.eagerSpeedup, 0, 'f', 3);
    else
        graph = tr("Graph vs eager: the pipeline was not captured into a graph");
    m_graphCheck->setText(graph + QStringLiteral(" · ") + checks.join(QStringLiteral(", ")));
    QStringList budgets;
    for (const auto& b : s.budgets)
        budgets << QString::fromStdString(kl::describeBudget(b));
    m_budgets->setText(budgets.isEmpty() ? tr("End-to-end budget: not recorded")
                                         : tr("End-to-end budget, from the honest error on the same inputs: %1")
                                               .arg(budgets.join(QStringLiteral("; "))));
}

QString PipelinePanel::summary() const
{
    return m_summary->text();
}
QString PipelinePanel::graphCheck() const
{
    return m_graphCheck->text();
}
QString PipelinePanel::budgets() const
{
    return m_budgets->text();
}
QString PipelinePanel::verdict() const
{
    return m_verdict->text();
}
QString PipelinePanel::error() const
{
    return m_error->isHidden() ? QString() : m_error->text();
}

} // namespace kl::app
