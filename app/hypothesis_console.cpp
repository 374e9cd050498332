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
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>

namespace kl::app {

namespace {

    QString textOf(const nlohmann::json& data)
    {
        for (const char* key : { "text", "delta", "content", "reply", "prompt", "message" }) {
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
    , m_streamTimer(new QTimer(this))
{
    m_streamTimer->setInterval(30);
    connect(m_streamTimer, &QTimer::timeout, this, &HypothesisConsole::streamSome);
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
    m_live = LiveReply();
    m_lastLive = LiveReply();
    m_finishedStreams.clear();
    m_streaming = false;
    m_pendingReply.clear();
    m_streamTimer->stop();
}

QString HypothesisConsole::transcript() const
{
    return m_transcript->toPlainText() + m_pendingReply;
}

bool HypothesisConsole::isStreaming() const
{
    return !m_pendingReply.isEmpty();
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

void HypothesisConsole::streamSome()
{
    if (m_pendingReply.isEmpty()) {
        m_streamTimer->stop();
        return;
    }
    // Faster when a lot is queued, so the transcript never falls far behind the session.
    const int n = std::max(24, static_cast<int>(m_pendingReply.size() / 20));
    QTextCursor cursor(m_transcript->document());
    cursor.movePosition(QTextCursor::End);
    cursor.insertText(m_pendingReply.left(n), QTextCharFormat());
    m_pendingReply.remove(0, n);
    QScrollBar* bar = m_transcript->verticalScrollBar();
    bar->setValue(bar->maximum());
}

void HypothesisConsole::flushPendingReply()
{
    if (m_pendingReply.isEmpty())
        return;
    // A new record arrived: finish the reply being revealed first.
    insertAtEnd(m_pendingReply);
    m_pendingReply.clear();
}

void HypothesisConsole::appendHeader(const QString& text, const QColor& colour)
{
    m_transcript->append(QStringLiteral("<span style='color:%1'>%2</span>").arg(colour.name(), text.toHtmlEscaped()));
    // A little air above each message; the text of a reply below it stays tight, like code.
    QTextCursor cursor(m_transcript->document());
    cursor.movePosition(QTextCursor::End);
    QTextBlockFormat block = cursor.blockFormat();
    block.setTopMargin(6);
    cursor.setBlockFormat(block);
}

void HypothesisConsole::insertAtEnd(const QString& text)
{
    QTextCursor cursor(m_transcript->document());
    cursor.movePosition(QTextCursor::End);
    cursor.insertText(text, QTextCharFormat());
}

void HypothesisConsole::appendLiveStream(const LiveStreamBatch& records)
{
    QScrollBar* bar = m_transcript->verticalScrollBar();
    const bool follow = bar->value() >= bar->maximum() - 4;
    for (const auto& r : records)
        appendLiveRecord(r);
    if (follow)
        bar->setValue(bar->maximum());
}

void HypothesisConsole::startLiveBlock(const kl::LiveStreamRecord& r)
{
    flushPendingReply();
    QString what;
    if (r.kind == kl::LiveStreamRecord::Kind::Begin)
        what = tr("← %1 replies (call %2, attempt %3), streaming…")
                   .arg(QString::fromStdString(r.model.empty() ? r.provider : r.model))
                   .arg(r.call)
                   .arg(r.attempt);
    else
        what = tr("← a reply streaming (joined while it was under way)…");
    appendHeader(what, theme().info);
    QTextCursor cursor(m_transcript->document());
    cursor.movePosition(QTextCursor::End);
    cursor.insertBlock(QTextBlockFormat(), QTextCharFormat());
    cursor.setCharFormat(QTextCharFormat());
    m_streaming = false;
    m_live = LiveReply();
    m_live.stream = r.stream;
    m_lastLive = m_live;
}

void HypothesisConsole::appendLiveRecord(const kl::LiveStreamRecord& r)
{
    using Kind = kl::LiveStreamRecord::Kind;
    if (m_finishedStreams.count(r.stream))
        return; // its journal record was shown already; these lines were read late
    if (r.kind == Kind::End) {
        if (m_live.stream == r.stream)
            m_live.stream.clear();
        return;
    }
    if (m_live.stream != r.stream)
        startLiveBlock(r);
    if (r.kind == Kind::Retry) {
        m_transcript->append(
            QStringLiteral("<span style='color:%1'>%2</span>")
                .arg(theme().warn.name(),
                    tr("retrying (%1): the reply starts again").arg(QString::fromStdString(r.text)).toHtmlEscaped()));
        QTextCursor cursor(m_transcript->document());
        cursor.movePosition(QTextCursor::End);
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat());
        cursor.setCharFormat(QTextCharFormat());
        m_live.text.clear();
        m_live.base = 0;
        m_live.gap = false;
    } else if (r.kind == Kind::Delta) {
        const std::uint64_t end = m_live.base + m_live.text.size();
        std::string text = r.text;
        if (r.offset > end) {
            // Lines were missed (the file was replaced before they were read): say so where they belong.
            insertAtEnd(QStringLiteral(" […] "));
            m_live.gap = true;
            m_live.base = r.offset - m_live.text.size();
        } else if (r.offset < end) {
            const std::uint64_t seen = end - r.offset;
            if (seen >= text.size())
                return;
            text.erase(0, seen);
        }
        insertAtEnd(QString::fromStdString(text));
        m_live.text += text;
    }
    m_lastLive = m_live;
}

bool HypothesisConsole::finishLiveReply(const kl::LlmReplyRecord& reply)
{
    const std::string& stream = reply.liveStream;
    if (stream.empty())
        return false;
    m_finishedStreams.insert(stream);
    const LiveReply shown = m_lastLive.stream == stream ? m_lastLive : LiveReply();
    if (m_live.stream == stream)
        m_live = LiveReply();
    if (shown.stream.empty())
        return false;
    const std::string& full = reply.text;
    if (shown.gap || full.compare(0, shown.text.size(), shown.text) != 0)
        return false; // the recorded reply is the truth: show it whole
    // The end of the reply may not have been read live yet.
    if (full.size() > shown.text.size())
        insertAtEnd(QString::fromStdString(full.substr(shown.text.size())));
    return true;
}

void HypothesisConsole::appendAgentMessage(const kl::Event& e)
{
    const nlohmann::json& d = e.data;
    const Theme& t = theme();
    const QString type = stringField(d, "type");
    auto header = [&](const QString& text, const QColor& colour) {
        flushPendingReply();
        appendHeader(text, colour);
        m_streaming = false;
    };
    auto body = [&](const QString& text, bool stream) {
        QTextCursor cursor(m_transcript->document());
        cursor.movePosition(QTextCursor::End);
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat());
        cursor.setCharFormat(QTextCharFormat());
        if (stream) {
            m_pendingReply += text;
            if (!m_streamTimer->isActive())
                m_streamTimer->start();
        } else {
            cursor.insertText(text, QTextCharFormat());
        }
    };

    if (const auto request = kl::llmRequestRecord(d)) {
        QString what
            = tr("→ %1 asks %2").arg(QString::fromStdString(request->provider), QString::fromStdString(request->model));
        if (!request->hypothesis.empty())
            what += tr(" · hypothesis %1").arg(QString::fromStdString(request->hypothesis));
        if (!request->baseCandidate.empty())
            what += tr(" · from %1").arg(QString::fromStdString(request->baseCandidate));
        header(what, t.mutedText);
        return;
    }
    if (const auto reply = kl::llmReplyRecord(d)) {
        const bool shownLive = finishLiveReply(*reply);
        QString what = tr("← reply from %1").arg(QString::fromStdString(reply->model));
        if (reply->usage)
            what += tr(" · %1 in / %2 out tokens")
                        .arg(static_cast<double>(reply->usage->inputTokens))
                        .arg(static_cast<double>(reply->usage->outputTokens));
        if (reply->elapsedMs)
            what += tr(" · %1 s").arg(*reply->elapsedMs / 1000.0, 0, 'f', 1);
        if (shownLive) {
            // The text is already there, streamed live: the record only closes it.
            header(what + tr(" · complete"), t.info);
            return;
        }
        header(what, t.info);
        body(QString::fromStdString(reply->text), true);
        m_streaming = false;
        return;
    }
    const auto q = [](const std::string& s) { return QString::fromStdString(s); };
    if (const auto proposal = kl::llmProposalRecord(d)) {
        header(tr("proposal (%1) from %2: %3").arg(q(proposal->form), q(proposal->baseCandidate), q(proposal->note)),
            t.accent);
        return;
    }
    if (const auto verdict = kl::llmVerdictRecord(d)) {
        header(tr("verdict on %1: %2").arg(q(verdict->candidate), q(verdict->verdict)), t.mutedText);
        return;
    }
    if (const auto error = kl::llmErrorRecord(d)) {
        if (!error->liveStream.empty()) {
            m_finishedStreams.insert(error->liveStream);
            if (m_live.stream == error->liveStream)
                m_live = LiveReply();
        }
        header(tr("%1: %2").arg(type, q(error->message)), t.bad);
        return;
    }
    if (const auto rejected = kl::llmReplyRejectedRecord(d)) {
        header(tr("%1: %2").arg(type, q(rejected->message)), t.bad);
        return;
    }
    if (const auto retry = kl::llmRetryRecord(d)) {
        header(tr("retrying (%1)").arg(q(retry->why)), t.warn);
        return;
    }

    // Other agents' records: text, streamed pieces ("delta"), or the raw record.
    const QString kind = stringField(d, "kind");
    const QString text = textOf(d);
    const bool isDelta = d.contains("delta") || kind == QLatin1String("delta") || kind == QLatin1String("chunk");
    if (isDelta && m_streaming) {
        QTextCursor cursor(m_transcript->document());
        cursor.movePosition(QTextCursor::End);
        cursor.insertText(text, QTextCharFormat());
        return;
    }
    const QString who = stringField(d, "agent").isEmpty() ? stringField(d, "role") : stringField(d, "agent");
    QString title = who.isEmpty() ? (type.isEmpty() ? tr("agent") : type) : who;
    if (!kind.isEmpty() && kind != QLatin1String("delta"))
        title += QStringLiteral(" · ") + kind;
    if (!e.candidateId.empty())
        title += QStringLiteral(" · ") + QString::fromStdString(e.candidateId);
    header(title, t.info);
    body(text.isEmpty() ? QString::fromStdString(d.dump()) : text, false);
    // A reply may arrive whole or in pieces; pieces that follow it continue the same paragraph.
    m_streaming = true;
}

} // namespace kl::app
