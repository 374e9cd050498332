#pragma once
// Line-based unified diff (Myers' O(ND) algorithm) between two candidate sources.
#include <string>
#include <vector>

namespace kl {

struct DiffLine {
    enum class Kind { Context, Added, Removed };
    Kind kind = Kind::Context;
    std::string text;
    int oldLine = 0; // 1-based; 0 when the line is not in the old text
    int newLine = 0;
};

struct DiffHunk {
    int oldStart = 0;
    int oldCount = 0;
    int newStart = 0;
    int newCount = 0;
    std::vector<DiffLine> lines;
};

std::vector<std::string> splitLines(const std::string& text);
std::vector<DiffLine> diffLines(const std::vector<std::string>& a, const std::vector<std::string>& b);
std::vector<DiffHunk> diffHunks(const std::string& oldText, const std::string& newText, int context = 3);
std::string unifiedDiff(const std::string& oldText, const std::string& newText, const std::string& oldName,
    const std::string& newName, int context = 3);

// Applies a unified diff; throws InputError naming the hunk that does not apply.
std::string applyUnifiedDiff(const std::string& oldText, const std::string& diff);

} // namespace kl
