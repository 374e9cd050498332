#pragma once
// The review queue dock: pending agent diffs and referee flags, with Approve and Reject (a reason is
// required to reject). Decisions go to the session through SessionController.
#include "app/app_types.h"

#include <QWidget>

class QLabel;
class QLineEdit;
class QPushButton;
class QTableView;

namespace kl::app {

class ReviewQueueModel;

class ReviewPanel : public QWidget {
    Q_OBJECT
public:
    explicit ReviewPanel(QWidget* parent = nullptr);

    ReviewQueueModel* model() const { return m_model; }
    QTableView* view() const { return m_view; }
    QLineEdit* reasonEdit() const { return m_reason; }
    QPushButton* approveButton() const { return m_approve; }
    QPushButton* rejectButton() const { return m_reject; }

    void setSession(const SessionSnapshot& s);
    void setWritable(bool writable);
    QString currentCandidate() const;

public slots:
    void approveCurrent();
    void rejectCurrent();

signals:
    void decided(const QString& candidateId, bool approved, const QString& reason);
    void candidateActivated(const QString& candidateId);

private:
    void updateButtons();

    ReviewQueueModel* m_model;
    QTableView* m_view;
    QLineEdit* m_reason;
    QPushButton* m_approve;
    QPushButton* m_reject;
    QLabel* m_hint;
    bool m_writable = false;
};

} // namespace kl::app
