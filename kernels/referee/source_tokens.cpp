#include "kernels/referee/source_tokens.h"

#include <array>
#include <cctype>
#include <string_view>

namespace kl::referee {
namespace {

    struct SourceChar {
        char c;
        int line;
    };

    // Backslash-newline splices removed up front so every later step sees logical lines.
    std::vector<SourceChar> spliceLines(const std::string& source)
    {
        std::vector<SourceChar> out;
        out.reserve(source.size());
        int line = 1;
        for (std::size_t i = 0; i < source.size(); ++i) {
            const char c = source[i];
            if (c == '\\') {
                std::size_t j = i + 1;
                if (j < source.size() && source[j] == '\r')
                    ++j;
                if (j < source.size() && source[j] == '\n') {
                    ++line;
                    i = j;
                    continue;
                }
            }
            if (c == '\r')
                continue;
            out.push_back({ c, line });
            if (c == '\n')
                ++line;
        }
        return out;
    }

    bool isIdentStart(char c)
    {
        return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$';
    }
    bool isIdentChar(char c)
    {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
    }

    constexpr std::array<std::string_view, 44> kPuncts = {
        "<<<",
        ">>>",
        "...",
        "<<=",
        ">>=",
        "->*",
        "<=>",
        "::",
        "->",
        "++",
        "--",
        "<<",
        ">>",
        "<=",
        ">=",
        "==",
        "!=",
        "&&",
        "||",
        "+=",
        "-=",
        "*=",
        "/=",
        "%=",
        "&=",
        "|=",
        "^=",
        "##",
        ".*",
        "{",
        "}",
        "(",
        ")",
        "[",
        "]",
        ";",
        ",",
        "<",
        ">",
        "=",
        "+",
        "-",
        "*",
        "/",
    };

    class Tokenizer {
    public:
        explicit Tokenizer(const std::string& source)
            : m_chars(spliceLines(source))
        {
        }

        std::vector<Token> run()
        {
            bool atLineStart = true;
            while (m_pos < m_chars.size()) {
                const char c = peek();
                if (c == '\n') {
                    endDirective();
                    atLineStart = true;
                    m_space = true;
                    ++m_pos;
                    continue;
                }
                if (std::isspace(static_cast<unsigned char>(c))) {
                    m_space = true;
                    ++m_pos;
                    continue;
                }
                if (c == '/' && peek(1) == '/') {
                    m_space = true;
                    while (m_pos < m_chars.size() && peek() != '\n')
                        ++m_pos;
                    continue;
                }
                if (c == '/' && peek(1) == '*') {
                    m_space = true;
                    m_pos += 2;
                    while (m_pos < m_chars.size() && !(peek() == '*' && peek(1) == '/'))
                        ++m_pos;
                    m_pos += 2;
                    continue;
                }
                const bool lineStart = atLineStart;
                atLineStart = false;
                if (c == '#' && lineStart && peek(1) != '#') {
                    directive();
                    continue;
                }
                if (isIdentStart(c)) {
                    identifierOrPrefixedLiteral();
                    continue;
                }
                if (std::isdigit(static_cast<unsigned char>(c))
                    || (c == '.' && std::isdigit(static_cast<unsigned char>(peek(1))))) {
                    number();
                    continue;
                }
                if (c == '"') {
                    quoted('"', TokenKind::String, line());
                    continue;
                }
                if (c == '\'') {
                    quoted('\'', TokenKind::Char, line());
                    continue;
                }
                punct();
            }
            endDirective();
            return std::move(m_tokens);
        }

    private:
        char peek(std::size_t ahead = 0) const
        {
            return m_pos + ahead < m_chars.size() ? m_chars[m_pos + ahead].c : '\0';
        }
        int line() const
        {
            return m_pos < m_chars.size() ? m_chars[m_pos].line : (m_chars.empty() ? 1 : m_chars.back().line);
        }

        void emit(TokenKind kind, std::string text, int atLine)
        {
            m_tokens.push_back({ kind, std::move(text), atLine, m_space });
            m_space = false;
        }

        void endDirective()
        {
            if (m_inDirective) {
                emit(TokenKind::DirectiveEnd, "", m_directiveLine);
                m_inDirective = false;
            }
        }

        void skipBlanks()
        {
            while (m_pos < m_chars.size() && (peek() == ' ' || peek() == '\t'))
                ++m_pos;
        }

        void directive()
        {
            const int at = line();
            ++m_pos; // '#'
            skipBlanks();
            std::string name;
            while (m_pos < m_chars.size() && isIdentChar(peek()))
                name += m_chars[m_pos++].c;
            emit(TokenKind::Directive, name, at);
            m_inDirective = true;
            m_directiveLine = at;
            if (name == "include" || name == "include_next") {
                skipBlanks();
                const char open = peek();
                const char close = open == '<' ? '>' : (open == '"' ? '"' : '\0');
                if (close != '\0') {
                    ++m_pos;
                    std::string header;
                    while (m_pos < m_chars.size() && peek() != close && peek() != '\n')
                        header += m_chars[m_pos++].c;
                    if (peek() == close)
                        ++m_pos;
                    emit(TokenKind::HeaderName, header, at);
                }
            }
        }

        void identifierOrPrefixedLiteral()
        {
            const int at = line();
            std::string text;
            while (m_pos < m_chars.size() && isIdentChar(peek()))
                text += m_chars[m_pos++].c;
            const bool stringPrefix = text == "u8" || text == "u" || text == "U" || text == "L";
            const bool rawPrefix = text == "R" || text == "u8R" || text == "uR" || text == "UR" || text == "LR";
            if (peek() == '"' && rawPrefix) {
                rawString(at);
                return;
            }
            if (peek() == '"' && stringPrefix) {
                quoted('"', TokenKind::String, at);
                return;
            }
            if (peek() == '\'' && stringPrefix) {
                quoted('\'', TokenKind::Char, at);
                return;
            }
            emit(TokenKind::Identifier, std::move(text), at);
        }

        void number()
        {
            const int at = line();
            std::string text;
            while (m_pos < m_chars.size()) {
                const char c = peek();
                if ((c == '+' || c == '-') && !text.empty()
                    && (text.back() == 'e' || text.back() == 'E' || text.back() == 'p' || text.back() == 'P')
                    && !(text.size() > 1 && (text[1] == 'x' || text[1] == 'X')
                        && (text.back() == 'e' || text.back() == 'E'))) {
                    text += c;
                    ++m_pos;
                    continue;
                }
                if (isIdentChar(c) || c == '.' || c == '\'') {
                    if (c != '\'')
                        text += c;
                    ++m_pos;
                    continue;
                }
                break;
            }
            emit(TokenKind::Number, std::move(text), at);
        }

        void quoted(char delimiter, TokenKind kind, int at)
        {
            ++m_pos; // opening delimiter
            std::string text;
            while (m_pos < m_chars.size() && peek() != delimiter && peek() != '\n') {
                if (peek() == '\\' && m_pos + 1 < m_chars.size()) {
                    text += m_chars[m_pos++].c;
                }
                text += m_chars[m_pos++].c;
            }
            if (peek() == delimiter)
                ++m_pos;
            emit(kind, std::move(text), at);
        }

        void rawString(int at)
        {
            ++m_pos; // '"'
            std::string delimiter;
            while (m_pos < m_chars.size() && peek() != '(' && peek() != '\n' && delimiter.size() < 16)
                delimiter += m_chars[m_pos++].c;
            if (peek() != '(') {
                emit(TokenKind::String, "", at);
                return;
            }
            ++m_pos;
            const std::string terminator = ")" + delimiter + "\"";
            std::string text;
            while (m_pos < m_chars.size()) {
                text += m_chars[m_pos++].c;
                if (text.size() >= terminator.size()
                    && text.compare(text.size() - terminator.size(), terminator.size(), terminator) == 0) {
                    text.resize(text.size() - terminator.size());
                    break;
                }
            }
            emit(TokenKind::String, std::move(text), at);
        }

        void punct()
        {
            const int at = line();
            for (const std::string_view p : kPuncts) {
                bool match = true;
                for (std::size_t k = 0; k < p.size(); ++k) {
                    if (peek(k) != p[k]) {
                        match = false;
                        break;
                    }
                }
                if (match) {
                    m_pos += p.size();
                    emit(TokenKind::Punct, std::string(p), at);
                    return;
                }
            }
            emit(TokenKind::Punct, std::string(1, peek()), at);
            ++m_pos;
        }

        std::vector<SourceChar> m_chars;
        std::size_t m_pos = 0;
        std::vector<Token> m_tokens;
        bool m_inDirective = false;
        int m_directiveLine = 0;
        bool m_space = false;
    };

} // namespace

std::vector<Token> tokenize(const std::string& source)
{
    return Tokenizer(source).run();
}

} // namespace kl::referee
