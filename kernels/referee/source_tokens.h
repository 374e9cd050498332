#pragma once
// A small C++/CUDA tokenizer for the static rules: comments vanish, string and character literals become
// single tokens (so their contents never look like identifiers), preprocessor directives are bracketed by
// Directive/DirectiveEnd tokens, and every token knows its source line.
#include <string>
#include <vector>

namespace kl::referee {

enum class TokenKind {
    Identifier,
    Number,
    String, // text is the literal's contents without quotes or prefix; escapes kept as written
    Char,
    Punct,
    Directive, // text is the directive name: "include", "define", "pragma", ...
    HeaderName, // the <...> or "..." operand of #include, without delimiters
    DirectiveEnd,
};

struct Token {
    TokenKind kind = TokenKind::Punct;
    std::string text;
    int line = 0;
    bool spaceBefore = false; // whitespace or a comment separates it from the previous token
};

std::vector<Token> tokenize(const std::string& source);

} // namespace kl::referee
