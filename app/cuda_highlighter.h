#pragma once
#include <QRegularExpression>
#include <QSyntaxHighlighter>
#include <QTextCharFormat>
#include <vector>

namespace kl::app {

// CUDA C++ highlighting: keywords, CUDA qualifiers and built-ins, numbers, strings, comments, the
// preprocessor and the @kl annotations that declare a candidate's tunable parameters and launch plan.
class CudaHighlighter : public QSyntaxHighlighter {
    Q_OBJECT
public:
    explicit CudaHighlighter(QTextDocument* document);

protected:
    void highlightBlock(const QString& text) override;

private:
    struct Rule {
        QRegularExpression pattern;
        QTextCharFormat format;
    };
    std::vector<Rule> m_rules;
    QTextCharFormat m_comment;
    QTextCharFormat m_annotation;
    QRegularExpression m_blockStart { QStringLiteral("/\\*") };
    QRegularExpression m_blockEnd { QStringLiteral("\\*/") };
};

} // namespace kl::app
