#pragma once
// Side-by-side diff of two candidate sources: aligned rows (changed blocks padded with filler rows),
// original line numbers in the gutters, CUDA highlighting, synchronised scrolling, next/previous change.
#include "core/diff.h"

#include <QPlainTextEdit>
#include <QWidget>
#include <vector>

class QLabel;
class QToolButton;

namespace kl::app {

class CudaHighlighter;

// One side of the diff: a read-only editor with a gutter that shows original line numbers
// (0 = a filler row, shown blank).
class CodeView : public QPlainTextEdit {
    Q_OBJECT
public:
    explicit CodeView(QWidget* parent = nullptr);
    void setRows(const QString& text, std::vector<int> lineNumbers);
    int gutterWidth() const;
    void paintGutter(QPaintEvent* event);

protected:
    void resizeEvent(QResizeEvent* event) override;

private:
    QWidget* m_gutter;
    std::vector<int> m_lineNumbers;
    CudaHighlighter* m_highlighter;
};

struct SideBySideRow {
    enum class Kind { Same, Changed, Removed, Added };
    Kind kind = Kind::Same;
    int oldLine = 0; // 0: filler on the left
    int newLine = 0; // 0: filler on the right
    QString oldText;
    QString newText;
};

// Pairs removed and added lines of each change block so the two sides line up.
std::vector<SideBySideRow> sideBySide(const std::string& oldText, const std::string& newText);

class DiffView : public QWidget {
    Q_OBJECT
public:
    explicit DiffView(QWidget* parent = nullptr);

    void setTexts(
        const QString& oldTitle, const std::string& oldText, const QString& newTitle, const std::string& newText);
    void clear(const QString& message = {});
    // Shown above the source diff (a tuner child differs from its parent only here); call after setTexts.
    void setParameterChanges(const std::vector<kl::ParamChange>& changes);
    QString parameterText() const;
    QString summaryText() const;

    int addedLines() const { return m_added; }
    int removedLines() const { return m_removed; }
    int changeCount() const { return static_cast<int>(m_changeStarts.size()); }
    const std::vector<SideBySideRow>& rows() const { return m_rows; }
    CodeView* leftView() const { return m_left; }
    CodeView* rightView() const { return m_right; }

public slots:
    void nextChange();
    void previousChange();

private:
    void applyBackgrounds();
    void scrollToRow(int row);

    QLabel* m_oldTitle;
    QLabel* m_newTitle;
    QLabel* m_summary;
    QLabel* m_params;
    CodeView* m_left;
    CodeView* m_right;
    std::vector<SideBySideRow> m_rows;
    std::vector<int> m_changeStarts;
    int m_currentChange = -1;
    int m_added = 0;
    int m_removed = 0;
};

} // namespace kl::app
