#pragma once
// What a user sees before a session is open: the problem catalogue, the bundled recorded sessions, open / resume /
// replay a session, open a trace, where kernels run, and recent sessions.
#include "app/demo_session.h"
#include "core/problem.h"

#include <QFutureWatcher>
#include <QWidget>
#include <vector>

class QComboBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QListWidgetItem;
class QTextBrowser;
class QTreeWidget;

namespace kl::app {

struct CatalogueEntry {
    QString name;
    QString folder;
    QString description;
    QStringList tags;
    QString dims; // "T in [1, 65536], H in [256, 16384]"
    int tuningShapes = 0;
    QString error; // problem.json did not load
};

// Reads every problem.json of the catalogue (runs on a worker thread).
std::vector<CatalogueEntry> loadCatalogue();

class StartPage : public QWidget {
    Q_OBJECT
public:
    explicit StartPage(QWidget* parent = nullptr);

    void reloadCatalogue();
    void setRecentSessions(const QStringList& dirs);
    // The bundled recorded sessions offered (title and one line each); openDemoRequested names the one clicked.
    void setDemos(const std::vector<BundledDemo>& demos);
    QStringList demoKeys() const { return m_demoKeys; }
    QString selectedProblem() const;
    // Where new sessions evaluate: empty for this machine's GPU alone, else worker specs in kloop run --workers'
    // grammar (local, local:GPU, ssh:[USER@]HOST[:GPU], slurm:PARTITION[:COUNT], a workers.json), remembered.
    QString workerSpecs() const;
    QString workerSpecsError() const; // why workerSpecs() does not parse (empty when it does)
    void setWorkerSpecs(const QString& specs); // selects the pool choice (tests, --workers)
    QTreeWidget* catalogueView() const { return m_catalogue; }
    bool catalogueLoaded() const { return m_catalogueLoaded; }

    static bool localGpuPresent(); // kl::app::localGpuPresent()
    // A line above the catalogue: what an automatic run is doing, or why it could not start (error).
    void setNotice(const QString& text, bool error = true);
    QString notice() const;

signals:
    void newSessionRequested(const QString& problemName);
    void openSessionRequested();
    void replaySessionRequested();
    void followSessionRequested();
    void openTraceRequested();
    void openDemoRequested(const QString& sessionDir);
    void recentSessionActivated(const QString& directory);
    void catalogueLoadedSignal();

private:
    void showProblem();
    void checkWorkerSpecs();

    QTreeWidget* m_catalogue;
    QTextBrowser* m_details;
    QListWidget* m_recent;
    QComboBox* m_where;
    QLineEdit* m_workers;
    QLabel* m_workersError;
    QLabel* m_gpuNote;
    QLabel* m_notice;
    QWidget* m_demos;
    QStringList m_demoKeys;
    QFutureWatcher<std::vector<CatalogueEntry>> m_watcher;
    std::vector<CatalogueEntry> m_entries;
    bool m_catalogueLoaded = false;
};

} // namespace kl::app
