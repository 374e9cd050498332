#include "app/review_panel.h"

#include "app/models/review_queue_model.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTableView>
#include <QVBoxLayout>

namespace kl::app {

ReviewPanel::ReviewPanel(QWidget* parent)
    : QWidget(parent)
    , m_model(new ReviewQueueModel(this))
    , m_view(new QTableView(this))
    , m_reason(new QLineEdit(this))
    , m_approve(new QPushButton(tr("Approve"), this))
    , m_reject(new QPushButton(tr("Reject"), this))
    , m_hint(new QLabel(this))
{
    setObjectName(QStringLiteral("reviewPanel"));
    m_view->setObjectName(QStringLiteral("reviewQueue"));
    m_view->setModel(m_model);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->verticalHeader()->hide();
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_view->setAlternatingRowColors(true);
    m_view->setShowGrid(false);
    m_view->setWordWrap(false);
    m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 8);
    m_reason->setPlaceholderText(tr("Reason (required to reject)"));
    m_reason->setObjectName(QStringLiteral("reviewReason"));
    m_approve->setObjectName(QStringLiteral("approveButton"));
    m_reject->setObjectName(QStringLiteral("rejectButton"));
    m_approve->setToolTip(tr("Approve the selected candidate (Ctrl+Shift+A)"));
    m_reject->setToolTip(tr("Reject the selected candidate with the reason (Ctrl+Shift+R)"));
    m_hint->setForegroundRole(QPalette::PlaceholderText);
    m_hint->setWordWrap(true);

    connect(m_approve, &QPushButton::clicked, this, &ReviewPanel::approveCurrent);
    connect(m_reject, &QPushButton::clicked, this, &ReviewPanel::rejectCurrent);
    connect(m_reason, &QLineEdit::returnPressed, this, &ReviewPanel::rejectCurrent);
    connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& idx) {
        updateButtons();
        if (idx.isValid())
            emit candidateActivated(m_model->candidateIdAt(idx.row()));
    });
    connect(m_model, &QAbstractItemModel::modelReset, this, &ReviewPanel::updateButtons);

    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_reason, 1);
    buttons->addWidget(m_approve);
    buttons->addWidget(m_reject);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_view, 1);
    layout->addLayout(buttons);
    layout->addWidget(m_hint);
    updateButtons();
}

void ReviewPanel::setSession(const SessionSnapshot& s)
{
    const QString current = currentCandidate();
    m_model->setSession(s);
    for (int row = 0; row < m_model->rowCount(); ++row) {
        if (m_model->candidateIdAt(row) == current) {
            m_view->selectRow(row);
            break;
        }
    }
    updateButtons();
}

void ReviewPanel::setWritable(bool writable)
{
    m_writable = writable;
    updateButtons();
}

QString ReviewPanel::currentCandidate() const
{
    const QModelIndex idx = m_view->currentIndex();
    return idx.isValid() ? m_model->candidateIdAt(idx.row()) : QString();
}

void ReviewPanel::approveCurrent()
{
    const QString id = currentCandidate();
    if (id.isEmpty() || !m_writable)
        return;
    emit decided(id, true, m_reason->text().trimmed());
    m_reason->clear();
}

void ReviewPanel::rejectCurrent()
{
    const QString id = currentCandidate();
    if (id.isEmpty() || !m_writable)
        return;
    const QString reason = m_reason->text().trimmed();
    if (reason.isEmpty()) {
        m_hint->setText(tr("Say why %1 is rejected: the agent reads the reason.").arg(id));
        m_reason->setFocus();
        return;
    }
    emit decided(id, false, reason);
    m_reason->clear();
}

void ReviewPanel::updateButtons()
{
    const bool hasItem = !currentCandidate().isEmpty();
    m_approve->setEnabled(m_writable && hasItem);
    m_reject->setEnabled(m_writable && hasItem);
    if (!m_writable)
        m_hint->setText(
            tr("Read-only session: decisions are disabled. Open the session directory (Ctrl+O) to review."));
    else if (m_model->rowCount() == 0)
        m_hint->setText(tr("Nothing waits for review."));
    else
        m_hint->setText(tr("%n item(s) wait for review.", nullptr, m_model->rowCount()));
}

} // namespace kl::app
