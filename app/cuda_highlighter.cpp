#include "app/cuda_highlighter.h"

#include "app/theme.h"

namespace kl::app {

namespace {

    QTextCharFormat fmt(const QColor& c, bool bold = false, bool italic = false)
    {
        QTextCharFormat f;
        f.setForeground(c);
        if (bold)
            f.setFontWeight(QFont::DemiBold);
        f.setFontItalic(italic);
        return f;
    }

    QString words(const QStringList& list)
    {
        return QStringLiteral("\\b(?:") + list.join(QLatin1Char('|')) + QStringLiteral(")\\b");
    }

} // namespace

CudaHighlighter::CudaHighlighter(QTextDocument* document)
    : QSyntaxHighlighter(document)
{
    const Theme& t = theme();
    const QStringList keywords = {
        QStringLiteral("if"),
        QStringLiteral("else"),
        QStringLiteral("for"),
        QStringLiteral("while"),
        QStringLiteral("do"),
        QStringLiteral("return"),
        QStringLiteral("break"),
        QStringLiteral("continue"),
        QStringLiteral("switch"),
        QStringLiteral("case"),
        QStringLiteral("default"),
        QStringLiteral("struct"),
        QStringLiteral("class"),
        QStringLiteral("template"),
        QStringLiteral("typename"),
        QStringLiteral("const"),
        QStringLiteral("constexpr"),
        QStringLiteral("static"),
        QStringLiteral("inline"),
        QStringLiteral("extern"),
        QStringLiteral("volatile"),
        QStringLiteral("using"),
        QStringLiteral("namespace"),
        QStringLiteral("sizeof"),
        QStringLiteral("static_cast"),
        QStringLiteral("reinterpret_cast"),
        QStringLiteral("auto"),
        QStringLiteral("true"),
        QStringLiteral("false"),
        QStringLiteral("nullptr"),
        QStringLiteral("asm"),
    };
    const QStringList cudaQualifiers = {
        QStringLiteral("__global__"),
        QStringLiteral("__device__"),
        QStringLiteral("__host__"),
        QStringLiteral("__shared__"),
        QStringLiteral("__constant__"),
        QStringLiteral("__restrict__"),
        QStringLiteral("__forceinline__"),
        QStringLiteral("__noinline__"),
        QStringLiteral("__launch_bounds__"),
        QStringLiteral("__managed__"),
        QStringLiteral("__grid_constant__"),
    };
    const QStringList types = {
        QStringLiteral("void"),
        QStringLiteral("bool"),
        QStringLiteral("char"),
        QStringLiteral("short"),
        QStringLiteral("int"),
        QStringLiteral("long"),
        QStringLiteral("unsigned"),
        QStringLiteral("signed"),
        QStringLiteral("float"),
        QStringLiteral("double"),
        QStringLiteral("half"),
        QStringLiteral("__half"),
        QStringLiteral("__half2"),
        QStringLiteral("__nv_bfloat16"),
        QStringLiteral("__nv_bfloat162"),
        QStringLiteral("__nv_fp8_e4m3"),
        QStringLiteral("size_t"),
        QStringLiteral("int8_t"),
        QStringLiteral("int32_t"),
        QStringLiteral("int64_t"),
        QStringLiteral("uint8_t"),
        QStringLiteral("uint32_t"),
        QStringLiteral("uint64_t"),
        QStringLiteral("float2"),
        QStringLiteral("float4"),
        QStringLiteral("int4"),
        QStringLiteral("uint4"),
        QStringLiteral("dim3"),
    };
    const QStringList builtins = {
        QStringLiteral("threadIdx"),
        QStringLiteral("blockIdx"),
        QStringLiteral("blockDim"),
        QStringLiteral("gridDim"),
        QStringLiteral("warpSize"),
        QStringLiteral("__syncthreads"),
        QStringLiteral("__syncwarp"),
        QStringLiteral("__shfl_sync"),
        QStringLiteral("__shfl_xor_sync"),
        QStringLiteral("__shfl_down_sync"),
        QStringLiteral("__ldg"),
        QStringLiteral("__fdividef"),
        QStringLiteral("rsqrtf"),
        QStringLiteral("__expf"),
        QStringLiteral("atomicAdd"),
        QStringLiteral("atomicMax"),
        QStringLiteral("__float2half"),
        QStringLiteral("__half2float"),
        QStringLiteral("__bfloat162float"),
        QStringLiteral("__float2bfloat16"),
        QStringLiteral("__pipeline_commit"),
        QStringLiteral("__cvta_generic_to_shared"),
    };
    m_rules.push_back({ QRegularExpression(words(keywords)), fmt(t.codeKeyword, true) });
    m_rules.push_back({ QRegularExpression(words(cudaQualifiers)), fmt(t.codeBuiltin, true) });
    m_rules.push_back({ QRegularExpression(words(types)), fmt(t.codeType) });
    m_rules.push_back({ QRegularExpression(words(builtins)), fmt(t.codeBuiltin) });
    m_rules.push_back(
        { QRegularExpression(QStringLiteral("\\b(?:0[xX][0-9a-fA-F]+|\\d+\\.?\\d*(?:[eE][-+]?\\d+)?)[fFuUlL]*\\b")),
            fmt(t.codeNumber) });
    m_rules.push_back({ QRegularExpression(QStringLiteral("^\\s*#\\s*\\w+")), fmt(t.codePreprocessor) });
    m_rules.push_back({ QRegularExpression(QStringLiteral("\"(?:[^\"\\\\]|\\\\.)*\"")), fmt(t.codeString) });
    m_comment = fmt(t.codeComment, false, true);
    m_annotation = fmt(t.codeAnnotation, true);
}

void CudaHighlighter::highlightBlock(const QString& text)
{
    for (const Rule& rule : m_rules) {
        auto it = rule.pattern.globalMatch(text);
        while (it.hasNext()) {
            const auto m = it.next();
            setFormat(m.capturedStart(), m.capturedLength(), rule.format);
        }
    }
    const int line = text.indexOf(QLatin1String("//"));
    if (line >= 0) {
        setFormat(line, text.size() - line, m_comment);
        const int annotation = text.indexOf(QLatin1String("@kl:"), line);
        if (annotation >= 0) {
            int end = annotation + 4;
            while (end < text.size() && text.at(end).isLetter())
                ++end;
            setFormat(annotation, end - annotation, m_annotation);
        }
    }

    setCurrentBlockState(0);
    int start = previousBlockState() == 1 ? 0 : text.indexOf(m_blockStart);
    while (start >= 0) {
        if (line >= 0 && start > line && previousBlockState() != 1)
            break;
        const auto end = m_blockEnd.match(text, start);
        int length;
        if (!end.hasMatch()) {
            setCurrentBlockState(1);
            length = text.size() - start;
        } else {
            length = end.capturedEnd() - start;
        }
        setFormat(start, length, m_comment);
        start = text.indexOf(m_blockStart, start + length);
    }
}

} // namespace kl::app
