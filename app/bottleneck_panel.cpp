#include "app/bottleneck_panel.h"

#include <QPushButton>
#include <QTextBrowser>
#include <QUrl>
#include <QVBoxLayout>

namespace kl::app {

BottleneckPanel::BottleneckPanel(QWidget* parent)
    : QWidget(parent)
    , m_text(new QTextBrowser(this))
    , m_use(new QPushButton(tr("Use as hypothesis"), this))
{
    setObjectName(QStringLiteral("bottleneckPanel"));
    m_use->setObjectName(QStringLiteral("useAsHypothesis"));
    m_use->setToolTip(tr("Put this summary into the hypothesis box (Ctrl+Shift+H)"));
    m_text->setPlaceholderText(tr("Open a trace to see where the time goes. Select a range in the timeline to "
                                  "analyse only that part."));
    m_use->setEnabled(false);
    m_text->setOpenLinks(false);
    connect(m_text, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
        if (url.scheme() == QLatin1String("tune"))
            requestTune(url.path());
    });
    connect(m_use, &QPushButton::clicked, this, [this]() {
        if (!m_summary.isEmpty())
            emit useAsHypothesis(m_summary);
    });
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_text, 1);
    layout->addWidget(m_use, 0, Qt::AlignRight);
}

QString BottleneckPanel::html() const
{
    return m_text->toHtml();
}

void BottleneckPanel::setAnalysis(const QString& html, const QString& summary)
{
    m_text->setHtml(html);
    m_summary = summary;
    m_use->setEnabled(!summary.isEmpty());
}

} // namespace kl::app
