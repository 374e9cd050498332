#pragma once
// Line-based unified diff (Myers' O(ND) algorithm) between two candidate sources.
#include <cstdint>
#include <map>
#include <optional>
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

// The parameters two candidates differ in (a tuner child has its parent's source and new values). Shown above
// the source diff by `kloop session diff` and the workbench.
struct ParamChange {
    std::string name;
    std::optional<std::int64_t> oldValue; // nullopt: not set on the old side
    std::optional<std::int64_t> newValue;
    std::string text() const; // "THREADS 256 -> 128", "VEC (unset) -> 4"
};
// In name order; parameters with equal values are left out.
std::vector<ParamChange> paramDiff(
    const std::map<std::string, std::int64_t>& oldParams, const std::map<std::string, std::int64_t>& newParams);

} // namespace kl
