#include "app/start_page.h"

#include "app/local_run.h"
#include "app/session_worker.h"
#include "app/theme.h"
#include "core/catalogue.h"
#include "core/json_io.h"
#include "kernels/pool/worker_spec.h"

#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSettings>
#include <QTextBrowser>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace kl::app {

std::vector<CatalogueEntry> loadCatalogue()
{
    std::vector<CatalogueEntry> out;
    std::vector<std::string> names;
    try {
        names = kl::listProblems();
    } catch (const std::exception&) {
        return out;
    }
    for (const auto& name : names) {
        CatalogueEntry entry;
        entry.name = QString::fromStdString(name);
        try {
            const auto folder = kl::findProblemFolder(name);
            entry.folder = QString::fromStdString(folder.string());
            const kl::Problem p = kl::loadProblem(folder.string());
            entry.description = QString::fromStdString(p.description);
            for (const auto& t : p.tags)
                entry.tags << QString::fromStdString(t);
            QStringList dims;
            for (const auto& d : p.dims)
                dims << QStringLiteral("%1 ∈ [%2, %3]").arg(QString::fromStdString(d.name)).arg(d.min).arg(d.max);
            entry.dims = dims.join(QStringLiteral(", "));
            entry.tuningShapes = static_cast<int>(p.tuningShapes.size());
        } catch (const std::exception& e) {
            entry.error = QString::fromStdString(e.what());
        }
        out.push_back(std::move(entry));
    }
    return out;
}

bool StartPage::localGpuPresent()
{
    return kl::app::localGpuPresent();
}

void StartPage::setNotice(const QString& text, bool error)
{
    m_notice->setText(text);
    m_notice->setVisible(!text.isEmpty());
    QPalette p = m_notice->palette();
    p.setColor(QPalette::WindowText, error ? theme().bad : theme().info);
    m_notice->setPalette(p);
}

QString StartPage::notice() const
{
    return m_notice->text();
}

StartPage::StartPage(QWidget* parent)
    : QWidget(parent)
    , m_catalogue(new QTreeWidget(this))
    , m_details(new QTextBrowser(this))
    , m_recent(new QListWidget(this))
    , m_where(new QComboBox(this))
    , m_workers(new QLineEdit(this))
    , m_workersError(new QLabel(this))
    , m_gpuNote(new QLabel(this))
    , m_notice(new QLabel(this))
{
    setObjectName(QStringLiteral("startPage"));
    auto* title = new QLabel(tr("KernelLoop"), this);
    QFont tf = title->font();
    tf.setPointSizeF(tf.pointSizeF() * 1.8);
    tf.setWeight(QFont::DemiBold);
    title->setFont(tf);
    auto* subtitle = new QLabel(
        tr("Human-in-the-loop auto-research on GPU kernels: the agent proposes, the harness verifies and times, "
           "you steer."),
        this);
    subtitle->setForegroundRole(QPalette::PlaceholderText);
    subtitle->setWordWrap(true);

    // Catalogue
    auto* catalogueBox = new QGroupBox(tr("Problem catalogue"), this);
    m_catalogue->setObjectName(QStringLiteral("problemCatalogue"));
    m_catalogue->setHeaderLabels({ tr("Problem"), tr("Tags"), tr("Shapes") });
    m_catalogue->setRootIsDecorated(false);
    m_catalogue->setAlternatingRowColors(true);
    m_catalogue->setStyleSheet(QStringLiteral("QTreeWidget::item { padding: 3px 0px; }"));
    m_catalogue->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    m_catalogue->header()->setSectionResizeMode(1, QHeaderView::Stretch);
    m_details->setMinimumHeight(90);
    m_details->setMaximumHeight(140);
    auto* newSession = new QPushButton(tr("New session on this problem…"), this);
    newSession->setObjectName(QStringLiteral("newSessionButton"));
    connect(m_catalogue, &QTreeWidget::currentItemChanged, this, &StartPage::showProblem);
    connect(newSession, &QPushButton::clicked, this, [this]() {
        if (!selectedProblem().isEmpty())
            emit newSessionRequested(selectedProblem());
    });
    auto* catalogueLayout = new QVBoxLayout(catalogueBox);
    catalogueLayout->addWidget(m_catalogue, 1);
    catalogueLayout->addWidget(m_details);
    catalogueLayout->addWidget(newSession, 0, Qt::AlignRight);

    // Sessions and traces
    auto* openBox = new QGroupBox(tr("Sessions and traces"), this);
    auto* openSession = new QPushButton(tr("Open or resume session…"), this);
    openSession->setToolTip(tr("Open a session directory for review and new hypotheses (Ctrl+O)"));
    auto* replaySession = new QPushButton(tr("Replay recorded session…"), this);
    replaySession->setToolTip(tr("Re-run a recorded session's journal with its original timing (Ctrl+Shift+O)"));
    auto* follow = new QPushButton(tr("Follow running session…"), this);
    follow->setToolTip(tr("Watch a session that kloop run is writing, live (Ctrl+Shift+F)"));
    connect(follow, &QPushButton::clicked, this, &StartPage::followSessionRequested);
    auto* openTrace = new QPushButton(tr("Open trace…"), this);
    openTrace->setToolTip(tr("Chrome/Kineto JSON, Nsight Systems SQLite or .kltrace (Ctrl+T)"));
    // The recorded sessions that ship with KernelLoop: one button and one line each (setDemos fills it).
    m_demos = new QWidget(this);
    m_demos->setObjectName(QStringLiteral("bundledDemos"));
    auto* demosLayout = new QVBoxLayout(m_demos);
    demosLayout->setContentsMargins(0, 0, 0, 0);
    connect(openSession, &QPushButton::clicked, this, &StartPage::openSessionRequested);
    connect(replaySession, &QPushButton::clicked, this, &StartPage::replaySessionRequested);
    connect(openTrace, &QPushButton::clicked, this, &StartPage::openTraceRequested);
    m_recent->setObjectName(QStringLiteral("recentSessions"));
    connect(m_recent, &QListWidget::itemActivated, this,
        [this](QListWidgetItem* item) { emit recentSessionActivated(item->data(Qt::UserRole).toString()); });
    auto* openLayout = new QVBoxLayout(openBox);
    openLayout->addWidget(m_demos);
    openLayout->addWidget(openSession);
    openLayout->addWidget(replaySession);
    openLayout->addWidget(follow);
    openLayout->addWidget(openTrace);
    openLayout->addSpacing(8);
    openLayout->addWidget(new QLabel(tr("Recent sessions"), this));
    openLayout->addWidget(m_recent, 1);

    // Where kernels run
    auto* whereBox = new QGroupBox(tr("Where kernels run"), this);
    const bool gpu = localGpuPresent();
    m_where->addItem(
        gpu ? tr("This machine's GPU") : tr("This machine (no NVIDIA GPU detected)"), QStringLiteral("local"));
    m_where->addItem(tr("A pool of workers (local, ssh, Slurm)"), QStringLiteral("pool"));
    m_where->setObjectName(QStringLiteral("workerWhere"));
    m_workers->setObjectName(QStringLiteral("workerSpecs"));
    m_workers->setPlaceholderText(tr("local,ssh:gpu-box,slurm:gpu:2 or workers.json"));
    m_workers->setToolTip(
        tr("The same specs as kloop run --workers, comma separated: local, local:GPU, ssh:[USER@]HOST[:GPU], "
           "ssh:HOST:PORT:GPU, slurm:PARTITION[:COUNT], or a workers.json file. ssh uses your ssh config, keys "
           "and agent; KernelLoop stores no secret."));
    m_workersError->setObjectName(QStringLiteral("workerSpecsError"));
    m_workersError->setWordWrap(true);
    m_workersError->setTextInteractionFlags(Qt::TextSelectableByMouse);
    QPalette errorPalette = m_workersError->palette();
    errorPalette.setColor(QPalette::WindowText, theme().bad);
    m_workersError->setPalette(errorPalette);
    QSettings settings;
    m_where->setCurrentIndex(settings.value(QStringLiteral("worker/where"), gpu ? 0 : 1).toInt() == 1 ? 1 : 0);
    m_workers->setText(settings.value(QStringLiteral("worker/specs")).toString());
    m_workers->setEnabled(m_where->currentIndex() == 1);
    connect(m_where, &QComboBox::currentIndexChanged, this, [this](int i) {
        m_workers->setEnabled(i == 1);
        QSettings().setValue(QStringLiteral("worker/where"), i);
        checkWorkerSpecs();
    });
    connect(m_workers, &QLineEdit::textChanged, this, &StartPage::checkWorkerSpecs);
    connect(m_workers, &QLineEdit::editingFinished, this,
        [this]() { QSettings().setValue(QStringLiteral("worker/specs"), m_workers->text().trimmed()); });
    m_gpuNote->setWordWrap(true);
    m_gpuNote->setForegroundRole(QPalette::PlaceholderText);
    m_gpuNote->setText(gpu ? tr("Sessions started here evaluate on the local GPU through kloop-worker, or on the "
                                "pool's workers (kloop run --workers).")
                           : tr("Without a GPU you can replay recorded sessions, review diffs and read traces, or "
                                "start sessions on a pool of remote workers (ssh hosts, a Slurm partition)."));
    auto* whereLayout = new QFormLayout(whereBox);
    whereLayout->addRow(tr("Evaluate on:"), m_where);
    whereLayout->addRow(tr("Workers:"), m_workers);
    whereLayout->addRow(m_workersError);
    whereLayout->addRow(m_gpuNote);

    auto* right = new QVBoxLayout;
    right->addWidget(openBox, 1);
    right->addWidget(whereBox);
    auto* columns = new QHBoxLayout;
    columns->addWidget(catalogueBox, 3);
    columns->addLayout(right, 2);
    // A calm, centred column: on a wide screen the page does not stretch into long empty lists.
    auto* content = new QWidget(this);
    content->setMaximumWidth(1180);
    content->setMaximumHeight(760);
    auto* layout = new QVBoxLayout(content);
    layout->setContentsMargins(24, 18, 24, 18);
    layout->addWidget(title);
    layout->addWidget(subtitle);
    m_notice->setObjectName(QStringLiteral("startNotice"));
    m_notice->setWordWrap(true);
    m_notice->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_notice->hide();
    layout->addWidget(m_notice);
    layout->addSpacing(10);
    layout->addLayout(columns, 1);
    auto* outer = new QHBoxLayout(this);
    outer->addStretch(1);
    outer->addWidget(content, 100);
    outer->addStretch(1);

    connect(&m_watcher, &QFutureWatcher<std::vector<CatalogueEntry>>::finished, this, [this]() {
        m_entries = m_watcher.result();
        m_catalogue->clear();
        for (const auto& e : m_entries) {
            auto* item = new QTreeWidgetItem(m_catalogue);
            item->setText(0, e.name);
            item->setText(1, e.error.isEmpty() ? e.tags.join(QStringLiteral(", ")) : tr("failed to load"));
            item->setText(2, e.error.isEmpty() ? QString::number(e.tuningShapes) : QString());
            item->setData(0, Qt::UserRole, e.name);
            if (!e.error.isEmpty())
                item->setForeground(1, theme().bad);
        }
        if (m_catalogue->topLevelItemCount() > 0)
            m_catalogue->setCurrentItem(m_catalogue->topLevelItem(0));
        else
            m_details->setHtml(tr("<i>No problems found. Set KL_PROBLEMS_DIR to a folder of problem folders.</i>"));
        m_catalogueLoaded = true;
        emit catalogueLoadedSignal();
    });
    checkWorkerSpecs();
    reloadCatalogue();
}

void StartPage::reloadCatalogue()
{
    m_catalogueLoaded = false;
    m_watcher.setFuture(QtConcurrent::run(&loadCatalogue));
}

void StartPage::setRecentSessions(const QStringList& dirs)
{
    m_recent->clear();
    for (const QString& dir : dirs) {
        auto* item = new QListWidgetItem(
            QDir(dir).dirName() + QStringLiteral("   ") + QDir::toNativeSeparators(dir), m_recent);
        item->setData(Qt::UserRole, dir);
        item->setToolTip(dir);
    }
    if (dirs.isEmpty()) {
        auto* item = new QListWidgetItem(tr("No recent sessions"), m_recent);
        item->setFlags(Qt::NoItemFlags);
    }
}

void StartPage::setDemos(const std::vector<BundledDemo>& demos)
{
    auto* layout = m_demos->layout();
    while (QLayoutItem* item = layout->takeAt(0)) {
        delete item->widget();
        delete item;
    }
    m_demoKeys.clear();
    for (const BundledDemo& demo : demos) {
        auto* button = new QPushButton(tr("Replay: %1").arg(demo.title), m_demos);
        // The rmsnorm one keeps the name it always had (scripts and tests look it up).
        button->setObjectName(demo.key == QLatin1String("rmsnorm") ? QStringLiteral("openDemoButton")
                                                                   : QStringLiteral("openDemoButton-") + demo.key);
        button->setToolTip(tr("Replays the recorded session that ships with KernelLoop, read-only: %1").arg(demo.dir));
        const QString dir = demo.dir;
        connect(button, &QPushButton::clicked, this, [this, dir]() { emit openDemoRequested(dir); });
        auto* line = new QLabel(demo.summary, m_demos);
        line->setObjectName(QStringLiteral("demoSummary-") + demo.key);
        line->setWordWrap(true);
        line->setForegroundRole(QPalette::PlaceholderText);
        layout->addWidget(button);
        layout->addWidget(line);
        m_demoKeys << demo.key;
    }
    if (demos.empty()) {
        auto* none = new QLabel(tr("This build has no bundled recorded session."), m_demos);
        none->setForegroundRole(QPalette::PlaceholderText);
        layout->addWidget(none);
    }
}

QString StartPage::selectedProblem() const
{
    const auto* item = m_catalogue->currentItem();
    return item ? item->data(0, Qt::UserRole).toString() : QString();
}

QString StartPage::workerSpecs() const
{
    return m_where->currentIndex() == 0 ? QString() : m_workers->text().trimmed();
}

QString StartPage::workerSpecsError() const
{
    return m_where->currentIndex() == 0 ? QString() : m_workersError->text();
}

void StartPage::setWorkerSpecs(const QString& specs)
{
    m_workers->setText(specs);
    m_where->setCurrentIndex(specs.trimmed().isEmpty() ? 0 : 1);
    QSettings().setValue(QStringLiteral("worker/specs"), specs.trimmed());
}

void StartPage::checkWorkerSpecs()
{
    QString error;
    if (m_where->currentIndex() == 1) {
        try {
            (void)kl::parseWorkerSpecs(m_workers->text().trimmed().toStdString());
        } catch (const std::exception& e) {
            error = QString::fromStdString(e.what());
        }
    }
    m_workersError->setText(error);
    m_workersError->setVisible(!error.isEmpty());
}

void StartPage::showProblem()
{
    const QString name = selectedProblem();
    for (const auto& e : m_entries) {
        if (e.name != name)
            continue;
        if (!e.error.isEmpty()) {
            m_details->setHtml(QStringLiteral("<b>%1</b><br><span style='color:%2'>%3</span>")
                                   .arg(e.name.toHtmlEscaped(), theme().bad.name(), e.error.toHtmlEscaped()));
            return;
        }
        m_details->setHtml(QStringLiteral("<b>%1</b> <span style='color:%2'>%3</span><br>%4<br><tt>%5</tt>")
                               .arg(e.name.toHtmlEscaped(), theme().mutedText.name(),
                                   QDir::toNativeSeparators(e.folder).toHtmlEscaped(), e.description.toHtmlEscaped(),
                                   e.dims.toHtmlEscaped()));
        return;
    }
}

} // namespace kl::app
