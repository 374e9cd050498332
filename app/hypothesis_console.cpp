#include "app/hypothesis_console.h"

#include "app/models/session_metrics.h"
#include "app/theme.h"

#include <QComboBox>
#include <QDateTime>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollBar>
#include <QShortcut>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace kl::app {

namespace {

QString textOf(const nlohmann::json& data)
{
    for (const char* key : {"text", "delta", "content", "reply", "prompt", "message"}) {
        const auto it = data.find(key);
        if (it != data.end() && it->is_string())
            return QString::fromStdString(it->get<std::string>());
    }
    return {};
}

QString stringField(const nlohmann::json& data, const char* key)
{
    const auto it = data.find(key);
    return it != data.end() && it->is_string() ? QString::fromStdString(it->get<std::string>()) : QString();
}

} // namespace

HypothesisConsole::HypothesisConsole(QWidget* parent)
    : QWidget(parent)
    , m_input(new QPlainTextEdit(this))
    , m_agent(new QComboBox(this))
    , m_send(new QPushButton(tr("Send"), this))
    , m_transcript(new QTextBrowser(this))
{
    setObjectName(QStringLiteral("hypothesisConsole"));
    m_input->setObjectName(QStringLiteral("hypothesisInput"));
    m_input->setPlaceholderText(
        tr("Type a hypothesis, e.g. \"the row reduction is latency-bound: use one warp per row with "
           "vectorised 16-byte loads\". Ctrl+Return sends it."));
    m_input->setMaximumHeight(m_input->fontMetrics().height() * 5 + 12);
    m_agent->addItem(tr("Built-in tuner"), QStringLiteral("tuner:anneal"));
    m_agent->addItem(tr("LLM: OpenAI-compatible"), QStringLiteral("llm:openai"));
    m_agent->addItem(tr("LLM: Anthropic"), QStringLiteral("llm:anthropic"));
    m_send->setObjectName(QStringLiteral("sendHypothesis"));
    m_transcript->setObjectName(QStringLiteral("agentTranscript"));
    m_transcript->setOpenExternalLinks(false);
    m_transcript->setFont(monospaceFont());
    m_transcript->setPlaceholderText(tr("Agent messages of the session appear here as they stream in."));

    connect(m_send, &QPushButton::clicked, this, &HypothesisConsole::submit);
    auto* sendShortcut = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return), m_input);
    sendShortcut->setContext(Qt::WidgetShortcut);
    connect(sendShortcut, &QShortcut::activated, this, &HypothesisConsole::submit);

    auto* row = new QHBoxLayout;
    row->addWidget(new QLabel(tr("Agent:"), this));
    row->addWidget(m_agent, 1);
    row->addWidget(m_send);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_transcript, 1);
    layout->addWidget(m_input);
    layout->addLayout(row);
    setWritable(false);
}

void HypothesisConsole::setHypothesisText(const QString& text)
{
    m_input->setPlainText(text);
    m_input->setFocus();
}

QString HypothesisConsole::hypothesisText() const
{
    return m_input->toPlainText();
}

void HypothesisConsole::setWritable(bool writable)
{
    m_writable = writable;
    m_send->setEnabled(writable);
    m_send->setToolTip(writable ? tr("Record the hypothesis in the session for the agent (Ctrl+Return)")
                                : tr("Read-only session: open a session directory to send hypotheses"));
}

void HypothesisConsole::submit()
{
    const QString text = m_input->toPlainText().trimmed();
    if (text.isEmpty() || !m_writable)
        return;
    emit hypothesisSubmitted(text, m_agent->currentData().toString());
    m_input->clear();
}

void HypothesisConsole::clearTranscript()
{
    m_transcript->clear();
    m_streaming = false;
}

QString HypothesisConsole::transcript() const
{
    return m_transcript->toPlainText();
}

void HypothesisConsole::appendEvents(const std::vector<kl::Event>& events)
{
    QScrollBar* bar = m_transcript->verticalScrollBar();
    const bool follow = bar->value() >= bar->maximum() - 4;
    for (const kl::Event& e : events) {
        if (e.kind == kl::EventKind::AgentMessage) {
            appendAgentMessage(e);
        } else if (e.kind == kl::EventKind::HypothesisAdded) {
            m_streaming = false;
            const QString text = stringField(e.data, "text");
            m_transcript->append(QStringLiteral("<p style='margin-top:8px'><b style='color:%1'>hypothesis %2</b>"
                                                "<br>%3</p>")
                                     .arg(theme().accent.name(), stringField(e.data, "id"), text.toHtmlEscaped()));
        } else if (e.kind == kl::EventKind::SessionState) {
            m_streaming = false;
            m_transcript->append(QStringLiteral("<span style='color:%1'>— session %2 %3</span>")
                                     .arg(theme().mutedText.name(), stringField(e.data, "state").toHtmlEscaped(),
                                          stringField(e.data, "reason").toHtmlEscaped()));
        }
    }
    if (follow)
        bar->setValue(bar->maximum());
}

void HypothesisConsole::appendAgentMessage(const kl::Event& e)
{
    const nlohmann::json& d = e.data;
    const QString kind = stringField(d, "kind").isEmpty() ? stringField(d, "type") : stringField(d, "kind");
    const QString text = textOf(d);
    const bool isDelta = d.contains("delta") || kind == QLatin1String("delta") || kind == QLatin1String("chunk");
    QTextCursor cursor(m_transcript->document());
    cursor.movePosition(QTextCursor::End);
    if (isDelta && m_streaming) {
        cursor.insertText(text);
        return;
    }
    const QString who = stringField(d, "agent").isEmpty() ? stringField(d, "role") : stringField(d, "agent");
    QString header = who.isEmpty() ? tr("agent") : who;
    if (!kind.isEmpty() && kind != QLatin1String("delta"))
        header += QStringLiteral(" · ") + kind;
    if (!e.candidateId.empty())
        header += QStringLiteral(" · ") + QString::fromStdString(e.candidateId);
    m_transcript->append(QStringLiteral("<span style='color:%1'>%2</span>")
                             .arg(theme().info.name(), header.toHtmlEscaped()));
    if (text.isEmpty()) {
        m_transcript->append(QString::fromStdString(d.dump()).toHtmlEscaped());
        m_streaming = false;
        return;
    }
    cursor.movePosition(QTextCursor::End);
    cursor.insertBlock();
    cursor.insertText(text);
    // A reply may arrive whole or in pieces; pieces that follow it continue the same paragraph.
    m_streaming = true;
}

} // namespace kl::app
