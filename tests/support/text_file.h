#pragma once
// A file's bytes for a test to look at; "" when it cannot be read (the assertion that follows says what was missing).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kl::test {

inline std::string readTextFile(const std::filesystem::path& p)
{
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

} // namespace kl::test
