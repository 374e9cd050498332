#include "core/diff.h"

#include "core/errors.h"

#include <algorithm>
#include <sstream>

namespace kl {

std::vector<std::string> splitLines(const std::string& text)
{
    std::vector<std::string> lines;
    std::size_t start = 0;
    while (start < text.size()) {
        const std::size_t nl = text.find('\n', start);
        if (nl == std::string::npos) {
            lines.push_back(text.substr(start));
            break;
        }
        lines.push_back(text.substr(start, nl - start));
        start = nl + 1;
    }
    return lines;
}

// Myers' greedy O((N+M)D) shortest edit script, with the trace kept to walk the path back.
std::vector<DiffLine> diffLines(const std::vector<std::string>& a, const std::vector<std::string>& b)
{
    const int n = static_cast<int>(a.size());
    const int m = static_cast<int>(b.size());
    const int max = n + m;
    const int offset = max + 1;
    std::vector<int> v(2 * static_cast<std::size_t>(max) + 3, 0);
    std::vector<std::vector<int>> trace;
    int dFinal = 0;
    for (int d = 0; d <= max; ++d) {
        trace.push_back(v);
        bool done = false;
        for (int k = -d; k <= d; k += 2) {
            int x;
            if (k == -d || (k != d && v[offset + k - 1] < v[offset + k + 1]))
                x = v[offset + k + 1];
            else
                x = v[offset + k - 1] + 1;
            int y = x - k;
            while (x < n && y < m && a[x] == b[y]) {
                ++x;
                ++y;
            }
            v[offset + k] = x;
            if (x >= n && y >= m) {
                done = true;
                break;
            }
        }
        if (done) {
            dFinal = d;
            trace.push_back(v);
            break;
        }
    }

    std::vector<DiffLine> out;
    int x = n, y = m;
    for (int d = dFinal; d > 0; --d) {
        const std::vector<int>& vd = trace[d]; // state before step d
        const int k = x - y;
        int prevK;
        if (k == -d || (k != d && vd[offset + k - 1] < vd[offset + k + 1]))
            prevK = k + 1;
        else
            prevK = k - 1;
        const int prevX = vd[offset + prevK];
        const int prevY = prevX - prevK;
        while (x > prevX && y > prevY) {
            --x;
            --y;
            out.push_back({ DiffLine::Kind::Context, a[x], x + 1, y + 1 });
        }
        if (x == prevX) {
            --y;
            out.push_back({ DiffLine::Kind::Added, b[y], 0, y + 1 });
        } else {
            --x;
            out.push_back({ DiffLine::Kind::Removed, a[x], x + 1, 0 });
        }
    }
    while (x > 0 && y > 0) {
        --x;
        --y;
        out.push_back({ DiffLine::Kind::Context, a[x], x + 1, y + 1 });
    }
    std::reverse(out.begin(), out.end());
    return out;
}

std::vector<DiffHunk> diffHunks(const std::string& oldText, const std::string& newText, int context)
{
    const auto a = splitLines(oldText);
    const auto b = splitLines(newText);
    const auto lines = diffLines(a, b);
    std::vector<DiffHunk> hunks;
    const int total = static_cast<int>(lines.size());
    if (context < 0)
        throw InputError("diff context must not be negative, got " + std::to_string(context));
    context = std::min(context, total); // more context than lines shows the whole file; keeps 2 * context in range
    int i = 0;
    while (i < total) {
        while (i < total && lines[i].kind == DiffLine::Kind::Context)
            ++i;
        if (i >= total)
            break;
        int start = std::max(0, i - context);
        int end = i;
        // Extend while the next change is within 2*context lines of context.
        for (;;) {
            while (end < total && lines[end].kind != DiffLine::Kind::Context)
                ++end;
            int gap = end;
            while (gap < total && lines[gap].kind == DiffLine::Kind::Context)
                ++gap;
            if (gap < total && gap - end <= 2 * context) {
                end = gap;
                continue;
            }
            end = std::min(total, end + context);
            break;
        }
        DiffHunk h;
        int oldLine = 0, newLine = 0;
        // Start positions: the line numbers of the first line, counting from the line before when absent.
        for (int j = 0; j < start; ++j) {
            if (lines[j].kind != DiffLine::Kind::Added)
                ++oldLine;
            if (lines[j].kind != DiffLine::Kind::Removed)
                ++newLine;
        }
        h.oldStart = oldLine + 1;
        h.newStart = newLine + 1;
        for (int j = start; j < end; ++j) {
            h.lines.push_back(lines[j]);
            if (lines[j].kind != DiffLine::Kind::Added)
                ++h.oldCount;
            if (lines[j].kind != DiffLine::Kind::Removed)
                ++h.newCount;
        }
        // Unified-diff convention: an empty side starts at the line before.
        if (h.oldCount == 0)
            h.oldStart = oldLine;
        if (h.newCount == 0)
            h.newStart = newLine;
        hunks.push_back(std::move(h));
        i = end;
    }
    return hunks;
}

std::string unifiedDiff(const std::string& oldText, const std::string& newText, const std::string& oldName,
    const std::string& newName, int context)
{
    std::ostringstream os;
    const auto hunks = diffHunks(oldText, newText, context);
    if (hunks.empty())
        return {};
    os << "--- " << oldName << "\n+++ " << newName << "\n";
    for (const auto& h : hunks) {
        os << "@@ -" << h.oldStart << "," << h.oldCount << " +" << h.newStart << "," << h.newCount << " @@\n";
        for (const auto& l : h.lines) {
            const char tag = l.kind == DiffLine::Kind::Added ? '+' : l.kind == DiffLine::Kind::Removed ? '-' : ' ';
            os << tag << l.text << "\n";
        }
    }
    return os.str();
}

namespace {
    bool parseRange(const std::string& s, int& start, int& count)
    {
        const auto comma = s.find(',');
        try {
            start = std::stoi(s.substr(0, comma));
            count = comma == std::string::npos ? 1 : std::stoi(s.substr(comma + 1));
        } catch (...) {
            return false;
        }
        return start >= 0 && count >= 0;
    }
} // namespace

std::string applyUnifiedDiff(const std::string& oldText, const std::string& diff)
{
    const auto src = splitLines(oldText);
    const auto patch = splitLines(diff);
    std::vector<std::string> out;
    std::size_t srcPos = 0; // 0-based index of the next unconsumed source line
    int hunkNo = 0;
    bool sawHunk = false;
    for (std::size_t p = 0; p < patch.size();) {
        const std::string& line = patch[p];
        if (line.rfind("@@", 0) != 0) {
            ++p;
            continue;
        }
        ++hunkNo;
        sawHunk = true;
        const auto minus = line.find('-');
        const auto plus = line.find('+', minus == std::string::npos ? 0 : minus);
        const auto close = line.find("@@", 2);
        int oldStart = 0, oldCount = 0, newStart = 0, newCount = 0;
        if (minus == std::string::npos || plus == std::string::npos || close == std::string::npos
            || !parseRange(line.substr(minus + 1, line.find(' ', minus) - minus - 1), oldStart, oldCount)
            || !parseRange(line.substr(plus + 1, line.find(' ', plus) - plus - 1), newStart, newCount))
            throw InputError("diff hunk " + std::to_string(hunkNo) + ": malformed header '" + abbreviate(line) + "'");
        ++p;
        std::vector<std::string> expectOld, produce;
        while (p < patch.size() && patch[p].rfind("@@", 0) != 0) {
            const std::string& l = patch[p];
            if (l.rfind("--- ", 0) == 0 || l.rfind("+++ ", 0) == 0) {
                if (static_cast<int>(expectOld.size()) >= oldCount && static_cast<int>(produce.size()) >= newCount)
                    break;
            }
            if (l.empty()) { // some tools drop the leading space of empty context lines
                expectOld.emplace_back();
                produce.emplace_back();
            } else if (l[0] == ' ') {
                expectOld.push_back(l.substr(1));
                produce.push_back(l.substr(1));
            } else if (l[0] == '-') {
                expectOld.push_back(l.substr(1));
            } else if (l[0] == '+') {
                produce.push_back(l.substr(1));
            } else if (l[0] != '\\') {
                break;
            }
            ++p;
        }
        while (!expectOld.empty() && static_cast<int>(expectOld.size()) > oldCount && expectOld.back().empty()
            && !produce.empty() && produce.back().empty()) {
            expectOld.pop_back();
            produce.pop_back();
        }
        // Find where the hunk applies: at its stated line, else the nearest exact match after srcPos.
        auto matchesAt = [&](std::size_t at) {
            if (at + expectOld.size() > src.size())
                return false;
            for (std::size_t k = 0; k < expectOld.size(); ++k)
                if (src[at + k] != expectOld[k])
                    return false;
            return true;
        };
        std::size_t stated
            = oldCount == 0 ? static_cast<std::size_t>(oldStart) : static_cast<std::size_t>(std::max(0, oldStart - 1));
        std::size_t at = std::string::npos;
        if (stated >= srcPos && matchesAt(stated)) {
            at = stated;
        } else {
            for (std::size_t cand = srcPos; cand + expectOld.size() <= src.size(); ++cand)
                if (matchesAt(cand)) {
                    at = cand;
                    break;
                }
        }
        if (at == std::string::npos)
            throw InputError("diff hunk " + std::to_string(hunkNo) + " (" + abbreviate(line)
                + ") does not apply: its context or removed lines are not in the source");
        for (; srcPos < at; ++srcPos)
            out.push_back(src[srcPos]);
        out.insert(out.end(), produce.begin(), produce.end());
        srcPos += expectOld.size();
    }
    if (!sawHunk)
        throw InputError("diff contains no hunk ('@@ -a,b +c,d @@' header)");
    for (; srcPos < src.size(); ++srcPos)
        out.push_back(src[srcPos]);
    std::string result;
    for (const auto& l : out) {
        result += l;
        result += '\n';
    }
    return result;
}

std::string ParamChange::text() const
{
    auto value = [](const std::optional<std::int64_t>& v) { return v ? std::to_string(*v) : std::string("(unset)"); };
    return name + " " + value(oldValue) + " -> " + value(newValue);
}

std::vector<ParamChange> paramDiff(
    const std::map<std::string, std::int64_t>& oldParams, const std::map<std::string, std::int64_t>& newParams)
{
    std::vector<ParamChange> changes;
    auto o = oldParams.begin();
    auto n = newParams.begin();
    while (o != oldParams.end() || n != newParams.end()) {
        if (n == newParams.end() || (o != oldParams.end() && o->first < n->first)) {
            changes.push_back({ o->first, o->second, std::nullopt });
            ++o;
        } else if (o == oldParams.end() || n->first < o->first) {
            changes.push_back({ n->first, std::nullopt, n->second });
            ++n;
        } else {
            if (o->second != n->second)
                changes.push_back({ o->first, o->second, n->second });
            ++o;
            ++n;
        }
    }
    return changes;
}

} // namespace kl
