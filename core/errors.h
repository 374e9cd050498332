#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace kl {

// A recoverable problem with user input (a file, a reply, a spec). The message names the file,
// the field or line, and what was wrong, so it can be shown to the user as it is.
class InputError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Text from the input echoed in a message: the start of it and its length when it is long, so that a 1 MB
// name or expression does not become a 1 MB error line.
inline std::string abbreviate(std::string_view text, std::size_t keep = 80)
{
    if (text.size() <= keep)
        return std::string(text);
    while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80)
        --keep; // not inside a UTF-8 sequence
    return std::string(text.substr(0, keep)) + "...(" + std::to_string(text.size()) + " chars)";
}

} // namespace kl
