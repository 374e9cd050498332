#include "app/regimes_panel.h"

#include "app/models/regime_table_model.h"
#include "core/regime_split.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableView>
#include <QVBoxLayout>

namespace kl::app {

RegimesPanel::RegimesPanel(QWidget* parent)
    : QWidget(parent)
    , m_model(new RegimeTableModel(this))
    , m_view(new QTableView(this))
    , m_suggestion(new QLabel(this))
{
    setObjectName(QStringLiteral("regimesPanel"));
    m_view->setObjectName(QStringLiteral("regimeTable"));
    m_view->setModel(m_model);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_view->verticalHeader()->hide();
    m_suggestion->setObjectName(QStringLiteral("regimeSuggestion"));
    m_suggestion->setWordWrap(true);
    m_suggestion->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_view, 1);
    layout->addWidget(m_suggestion);
    connect(m_view, &QTableView::clicked, this, [this](const QModelIndex& index) {
        const QString id = index.data(RegimeTableModel::CandidateIdRole).toString();
        if (!id.isEmpty())
            emit candidateActivated(id);
    });
    updateSuggestion();
}

void RegimesPanel::setProblem(const std::optional<kl::Problem>& problem)
{
    m_problem = problem;
    updateSuggestion();
}

void RegimesPanel::setSession(const SessionSnapshot& session)
{
    m_session = session;
    m_model->setSession(session);
    updateSuggestion();
}

QString RegimesPanel::suggestion() const
{
    return m_suggestion->text();
}

void RegimesPanel::updateSuggestion()
{
    QString text;
    if (m_problem && m_session) {
        try {
            const kl::RegimeSplit split = kl::learnRegimes(*m_problem, *m_session);
            if (split.configurations == 1) {
                text = tr("One configuration is timed so far (%1, %2x): nothing to compare.")
                           .arg(QString::fromStdString(split.singleBest))
                           .arg(split.singleObjective, 0, 'f', 3);
            } else if (split.cuts == 0 && split.regimes.size() > 1) {
                text = tr("No split inside the problem's regimes raises the geometric mean over %1 configurations by "
                          "%2%: they stand.")
                           .arg(split.configurations)
                           .arg(kl::RegimeSplitOptions {}.minGain * 100);
            } else if (split.regimes.size() == 1) {
                text = tr("Per-shape winners agree across %1 configurations: one configuration serves the tuning "
                          "shapes (%2, %3x).")
                           .arg(split.configurations)
                           .arg(QString::fromStdString(split.singleBest))
                           .arg(split.singleObjective, 0, 'f', 3);
            } else {
                QStringList parts;
                for (const kl::LearnedRegime& r : split.regimes)
                    parts << (r.shapes.empty()
                            ? tr("%1 (%2): not timed")
                                  .arg(QString::fromStdString(r.name), QString::fromStdString(r.condition))
                            : tr("%1 (%2): %3 at %4x")
                                  .arg(QString::fromStdString(r.name), QString::fromStdString(r.condition),
                                      QString::fromStdString(r.best), QString::number(r.objective, 'f', 3)));
                const QString overStart = split.regimes.size() > static_cast<std::size_t>(split.cuts) + 1
                    ? tr(" and %1x the problem's regimes").arg(split.objective / split.startObjective, 0, 'f', 3)
                    : QString();
                text = tr("Per-shape winners change: a best per learned regime gives %1x the single best (%2)%3. %4. "
                          "`kloop session regimes` prints them as problem.json \"regimes\".")
                           .arg(split.objective / split.singleObjective, 0, 'f', 3)
                           .arg(QString::fromStdString(split.singleBest), overStart, parts.join(QStringLiteral("; ")));
            }
        } catch (const std::exception&) {
            text.clear(); // nothing timed against the baseline yet
        }
    }
    m_suggestion->setText(text);
    m_suggestion->setVisible(!text.isEmpty());
}

} // namespace kl::app
