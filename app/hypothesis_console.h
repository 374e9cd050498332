#pragma once
// The hypothesis console: the engineer types a high-level hypothesis for the chosen agent, and the
// agents' messages (prompts, streamed replies, usage) from the session's journal stream in below.
#include "app/app_types.h"
#include "core/agent_records.h"
#include "core/events.h"

#include <QWidget>
#include <set>
#include <string>
#include <vector>

class QComboBox;
class QPlainTextEdit;
class QPushButton;
class QTextBrowser;
class QTimer;

namespace kl::app {

class HypothesisConsole : public QWidget {
    Q_OBJECT
public:
    explicit HypothesisConsole(QWidget* parent = nullptr);

    void setHypothesisText(const QString& text);
    QString hypothesisText() const;
    void setWritable(bool writable);
    void clearTranscript();
    void appendEvents(const std::vector<kl::Event>& events);
    // The reply of a run in another process while it streams (follow mode); the journal's llm.reply, which
    // names the same stream, completes it later.
    void appendLiveStream(const kl::app::LiveStreamBatch& records);
    QString transcript() const; // including the part of a reply still being revealed
    bool isStreaming() const;
    QString liveStream() const { return QString::fromStdString(m_live.stream); } // streaming now, or empty
    QPlainTextEdit* editor() const { return m_input; }
    QPushButton* sendButton() const { return m_send; }

signals:
    void hypothesisSubmitted(const QString& text, const QString& agent);

private:
    void submit();
    void appendAgentMessage(const kl::Event& e);

    void streamSome();
    void flushPendingReply();
    void startLiveBlock(const kl::LiveStreamRecord& r);
    void insertAtEnd(const QString& text);
    void appendHeader(const QString& text, const QColor& colour);
    void appendLiveRecord(const kl::LiveStreamRecord& r);
    bool finishLiveReply(const kl::LlmReplyRecord& reply); // true if the live view showed it and is now complete

    QPlainTextEdit* m_input;
    QComboBox* m_agent;
    QPushButton* m_send;
    QTextBrowser* m_transcript;
    bool m_streaming = false; // the last line is an unfinished streamed reply
    bool m_writable = false;
    // A recorded reply is revealed in chunks, the way it streamed in when it was recorded.
    QString m_pendingReply;
    QTimer* m_streamTimer;
    // The reply streaming in live: its stream, the UTF-8 text shown, and the reply offset of that text's start.
    struct LiveReply {
        std::string stream;
        std::string text;
        std::uint64_t base = 0;
        bool gap = false; // some of it was never read (the reader joined late or fell behind)
    };
    LiveReply m_live; // the stream being shown now
    LiveReply m_lastLive; // the last stream shown, until its journal record arrives
    std::set<std::string> m_finishedStreams; // their journal record arrived: late lines are ignored
};

} // namespace kl::app
