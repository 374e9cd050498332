#pragma once
// The hypothesis console: the engineer types a high-level hypothesis for the chosen agent, and the
// agents' messages (prompts, streamed replies, usage) from the session's journal stream in below.
#include "core/events.h"

#include <QWidget>
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
    QString transcript() const; // including the part of a reply still being revealed
    bool isStreaming() const;
    QPlainTextEdit* editor() const { return m_input; }
    QPushButton* sendButton() const { return m_send; }

signals:
    void hypothesisSubmitted(const QString& text, const QString& agent);

private:
    void submit();
    void appendAgentMessage(const kl::Event& e);

    void streamSome();

    QPlainTextEdit* m_input;
    QComboBox* m_agent;
    QPushButton* m_send;
    QTextBrowser* m_transcript;
    bool m_streaming = false; // the last line is an unfinished streamed reply
    bool m_writable = false;
    // A recorded reply is revealed in chunks, the way it streamed in when it was recorded.
    QString m_pendingReply;
    QTimer* m_streamTimer;
};

} // namespace kl::app
