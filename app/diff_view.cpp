#include "app/diff_view.h"

#include "app/cuda_highlighter.h"
#include "app/theme.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPainter>
#include <QScrollBar>
#include <QSplitter>
#include <QTextBlock>
#include <QToolButton>
#include <QVBoxLayout>

namespace kl::app {

namespace {

    class Gutter : public QWidget {
    public:
        explicit Gutter(CodeView* view)
            : QWidget(view)
            , m_view(view)
        {
        }
        QSize sizeHint() const override { return { m_view->gutterWidth(), 0 }; }

    protected:
        void paintEvent(QPaintEvent* event) override { m_view->paintGutter(event); }

    private:
        CodeView* m_view;
    };

} // namespace

CodeView::CodeView(QWidget* parent)
    : QPlainTextEdit(parent)
    , m_gutter(new Gutter(this))
    , m_highlighter(new CudaHighlighter(document()))
{
    setReadOnly(true);
    setLineWrapMode(QPlainTextEdit::NoWrap);
    setFont(monospaceFont());
    setFrameShape(QFrame::NoFrame);
    setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::TextSelectableByKeyboard);
    connect(this, &QPlainTextEdit::updateRequest, this, [this](const QRect& rect, int dy) {
        if (dy)
            m_gutter->scroll(0, dy);
        else
            m_gutter->update(0, rect.y(), m_gutter->width(), rect.height());
    });
    setViewportMargins(gutterWidth(), 0, 0, 0);
}

void CodeView::setRows(const QString& text, std::vector<int> lineNumbers)
{
    m_lineNumbers = std::move(lineNumbers);
    setPlainText(text);
    setViewportMargins(gutterWidth(), 0, 0, 0);
    m_gutter->update();
}

int CodeView::gutterWidth() const
{
    int maxLine = 1;
    for (int n : m_lineNumbers)
        maxLine = std::max(maxLine, n);
    const int digits = std::max(3, static_cast<int>(QString::number(maxLine).size()));
    return 12 + fontMetrics().horizontalAdvance(QLatin1Char('9')) * digits;
}

void CodeView::resizeEvent(QResizeEvent* event)
{
    QPlainTextEdit::resizeEvent(event);
    const QRect cr = contentsRect();
    m_gutter->setGeometry(QRect(cr.left(), cr.top(), gutterWidth(), cr.height()));
}

void CodeView::paintGutter(QPaintEvent* event)
{
    const Theme& t = theme();
    QPainter painter(m_gutter);
    painter.fillRect(event->rect(), t.window);
    painter.setPen(t.mutedText);
    painter.setFont(font());
    QTextBlock block = firstVisibleBlock();
    int top = qRound(blockBoundingGeometry(block).translated(contentOffset()).top());
    int bottom = top + qRound(blockBoundingRect(block).height());
    const int width = m_gutter->width() - 6;
    while (block.isValid() && top <= event->rect().bottom()) {
        const int row = block.blockNumber();
        if (block.isVisible() && bottom >= event->rect().top() && row < static_cast<int>(m_lineNumbers.size())
            && m_lineNumbers[row] > 0) {
            painter.drawText(
                0, top, width, fontMetrics().height(), Qt::AlignRight, QString::number(m_lineNumbers[row]));
        }
        block = block.next();
        top = bottom;
        bottom = top + qRound(blockBoundingRect(block).height());
    }
}

std::vector<SideBySideRow> sideBySide(const std::string& oldText, const std::string& newText)
{
    const auto lines = kl::diffLines(kl::splitLines(oldText), kl::splitLines(newText));
    std::vector<SideBySideRow> rows;
    std::vector<const kl::DiffLine*> removed, added;
    auto flush = [&]() {
        const std::size_t n = std::max(removed.size(), added.size());
        for (std::size_t i = 0; i < n; ++i) {
            SideBySideRow r;
            if (i < removed.size()) {
                r.oldLine = removed[i]->oldLine;
                r.oldText = QString::fromStdString(removed[i]->text);
            }
            if (i < added.size()) {
                r.newLine = added[i]->newLine;
                r.newText = QString::fromStdString(added[i]->text);
            }
            r.kind = (i < removed.size() && i < added.size()) ? SideBySideRow::Kind::Changed
                : i < removed.size()                          ? SideBySideRow::Kind::Removed
                                                              : SideBySideRow::Kind::Added;
            rows.push_back(std::move(r));
        }
        removed.clear();
        added.clear();
    };
    for (const auto& line : lines) {
        switch (line.kind) {
        case kl::DiffLine::Kind::Removed:
            removed.push_back(&line);
            break;
        case kl::DiffLine::Kind::Added:
            added.push_back(&line);
            break;
        case kl::DiffLine::Kind::Context: {
            flush();
            SideBySideRow r;
            r.oldLine = line.oldLine;
            r.newLine = line.newLine;
            r.oldText = r.newText = QString::fromStdString(line.text);
            rows.push_back(std::move(r));
            break;
        }
        }
    }
    flush();
    return rows;
}

DiffView::DiffView(QWidget* parent)
    : QWidget(parent)
    , m_oldTitle(new QLabel(this))
    , m_newTitle(new QLabel(this))
    , m_summary(new QLabel(this))
    , m_params(new QLabel(this))
    , m_left(new CodeView(this))
    , m_right(new CodeView(this))
{
    setObjectName(QStringLiteral("diffView"));
    auto* header = new QHBoxLayout;
    header->setContentsMargins(8, 4, 8, 4);
    auto* prev = new QToolButton(this);
    prev->setText(QStringLiteral("↑"));
    prev->setToolTip(tr("Previous change (Shift+F7)"));
    prev->setAutoRaise(true);
    auto* next = new QToolButton(this);
    next->setText(QStringLiteral("↓"));
    next->setToolTip(tr("Next change (F7)"));
    next->setAutoRaise(true);
    connect(prev, &QToolButton::clicked, this, &DiffView::previousChange);
    connect(next, &QToolButton::clicked, this, &DiffView::nextChange);
    m_summary->setForegroundRole(QPalette::PlaceholderText);
    header->addWidget(m_oldTitle, 1);
    header->addWidget(m_summary);
    header->addWidget(prev);
    header->addWidget(next);
    header->addWidget(m_newTitle, 1);
    m_newTitle->setAlignment(Qt::AlignRight | Qt::AlignVCenter);

    auto* splitter = new QSplitter(Qt::Horizontal, this);
    splitter->addWidget(m_left);
    splitter->addWidget(m_right);
    splitter->setChildrenCollapsible(false);
    splitter->setHandleWidth(2);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);
    layout->addLayout(header);
    m_params->setObjectName(QStringLiteral("parameterChanges"));
    m_params->setContentsMargins(8, 2, 8, 4);
    m_params->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_params->setWordWrap(true);
    m_params->hide();
    layout->addWidget(m_params);
    layout->addWidget(splitter, 1);

    // Both sides have the same rows, so scrolling one scrolls the other by the same amount.
    auto sync = [](QScrollBar* from, QScrollBar* to) {
        QObject::connect(from, &QScrollBar::valueChanged, to, [to](int v) {
            if (to->value() != v)
                to->setValue(v);
        });
    };
    sync(m_left->verticalScrollBar(), m_right->verticalScrollBar());
    sync(m_right->verticalScrollBar(), m_left->verticalScrollBar());
    sync(m_left->horizontalScrollBar(), m_right->horizontalScrollBar());
    sync(m_right->horizontalScrollBar(), m_left->horizontalScrollBar());
    clear(tr("Select a candidate to see its diff against its parent."));
}

void DiffView::clear(const QString& message)
{
    m_rows.clear();
    m_changeStarts.clear();
    m_added = m_removed = 0;
    m_oldTitle->setText(message);
    m_newTitle->clear();
    m_summary->clear();
    m_params->clear();
    m_params->hide();
    m_left->setRows(QString(), {});
    m_right->setRows(QString(), {});
}

void DiffView::setTexts(
    const QString& oldTitle, const std::string& oldText, const QString& newTitle, const std::string& newText)
{
    m_rows = sideBySide(oldText, newText);
    m_params->clear();
    m_params->hide();
    m_changeStarts.clear();
    m_currentChange = -1;
    m_added = m_removed = 0;
    QStringList left, right;
    std::vector<int> leftNumbers, rightNumbers;
    bool inChange = false;
    for (int i = 0; i < static_cast<int>(m_rows.size()); ++i) {
        const auto& r = m_rows[i];
        left << r.oldText;
        right << r.newText;
        leftNumbers.push_back(r.oldLine);
        rightNumbers.push_back(r.newLine);
        const bool changed = r.kind != SideBySideRow::Kind::Same;
        if (changed && !inChange)
            m_changeStarts.push_back(i);
        inChange = changed;
        if (r.oldLine > 0 && changed)
            ++m_removed;
        if (r.newLine > 0 && changed)
            ++m_added;
    }
    m_left->setRows(left.join(QLatin1Char('\n')), std::move(leftNumbers));
    m_right->setRows(right.join(QLatin1Char('\n')), std::move(rightNumbers));
    m_oldTitle->setText(oldTitle);
    m_newTitle->setText(newTitle);
    if (m_changeStarts.empty())
        m_summary->setText(tr("identical sources"));
    else
        m_summary->setText(tr("%1 change(s)   −%2  +%3").arg(m_changeStarts.size()).arg(m_removed).arg(m_added));
    applyBackgrounds();
    if (!m_changeStarts.empty()) {
        m_currentChange = 0;
        scrollToRow(std::max(0, m_changeStarts.front() - 3));
    }
}

void DiffView::setParameterChanges(const std::vector<kl::ParamChange>& changes)
{
    QStringList lines;
    for (const auto& c : changes)
        lines << QString::fromStdString(c.text()).replace(QStringLiteral(" -> "), QStringLiteral(" → "));
    m_params->setText(lines.isEmpty() ? QString() : tr("Parameters: %1").arg(lines.join(QStringLiteral(" · "))));
    m_params->setVisible(!lines.isEmpty());
    if (!lines.isEmpty() && m_changeStarts.empty())
        m_summary->setText(tr("identical sources, %n parameter(s) changed", nullptr, static_cast<int>(lines.size())));
}

QString DiffView::parameterText() const
{
    return m_params->text();
}

QString DiffView::summaryText() const
{
    return m_summary->text();
}

void DiffView::applyBackgrounds()
{
    const Theme& t = theme();
    QList<QTextEdit::ExtraSelection> leftSel, rightSel;
    auto add = [](QList<QTextEdit::ExtraSelection>& list, CodeView* view, int row, const QColor& color) {
        QTextEdit::ExtraSelection sel;
        sel.cursor = QTextCursor(view->document()->findBlockByNumber(row));
        sel.format.setBackground(color);
        sel.format.setProperty(QTextFormat::FullWidthSelection, true);
        list << sel;
    };
    for (int i = 0; i < static_cast<int>(m_rows.size()); ++i) {
        const auto& r = m_rows[i];
        if (r.kind == SideBySideRow::Kind::Same)
            continue;
        add(leftSel, m_left, i, r.oldLine > 0 ? t.diffRemoved : t.diffFiller);
        add(rightSel, m_right, i, r.newLine > 0 ? t.diffAdded : t.diffFiller);
    }
    m_left->setExtraSelections(leftSel);
    m_right->setExtraSelections(rightSel);
}

void DiffView::scrollToRow(int row)
{
    m_left->verticalScrollBar()->setValue(row);
}

void DiffView::nextChange()
{
    if (m_changeStarts.empty())
        return;
    m_currentChange = (m_currentChange + 1) % static_cast<int>(m_changeStarts.size());
    scrollToRow(std::max(0, m_changeStarts[m_currentChange] - 3));
}

void DiffView::previousChange()
{
    if (m_changeStarts.empty())
        return;
    const int n = static_cast<int>(m_changeStarts.size());
    m_currentChange = (m_currentChange - 1 + n) % n;
    scrollToRow(std::max(0, m_changeStarts[m_currentChange] - 3));
}

} // namespace kl::app
