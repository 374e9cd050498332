#pragma once
#include <stdexcept>
#include <string>

namespace kl {

// A recoverable problem with user input (a file, a reply, a spec). The message names the file,
// the field or line, and what was wrong, so it can be shown to the user as it is.
class InputError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

} // namespace kl
