#include "agent/prompt/context_loader.h"

#include "core/catalogue.h"
#include "core/errors.h"
#include "core/session_store.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace fs = std::filesystem;

namespace kl::prompt {

namespace {

    std::string trim(const std::string& s)
    {
        const auto b = s.find_first_not_of(" \t\r");
        if (b == std::string::npos)
            return {};
        const auto e = s.find_last_not_of(" \t\r");
        return s.substr(b, e - b + 1);
    }

    std::vector<std::string> parseList(const std::string& value, const std::string& where)
    {
        std::string v = trim(value);
        if (!v.empty() && v.front() == '[') {
            if (v.back() != ']')
                throw InputError(where + ": list starts with '[' but does not end with ']'");
            v = v.substr(1, v.size() - 2);
        }
        std::vector<std::string> out;
        std::stringstream ss(v);
        std::string item;
        while (std::getline(ss, item, ',')) {
            item = trim(item);
            if (item.size() >= 2 && (item.front() == '"' || item.front() == '\'') && item.back() == item.front())
                item = item.substr(1, item.size() - 2);
            if (!item.empty())
                out.push_back(item);
        }
        return out;
    }

    ContextSection sectionOf(const std::string& relativePath)
    {
        const auto slash = relativePath.find('/');
        const std::string top = slash == std::string::npos ? "" : relativePath.substr(0, slash);
        if (top == "rules")
            return ContextSection::Rules;
        if (top == "hardware")
            return ContextSection::Hardware;
        if (top == "models")
            return ContextSection::Models;
        return ContextSection::Notes;
    }

    std::string firstHeading(const std::string& body)
    {
        std::istringstream in(body);
        std::string line;
        while (std::getline(in, line))
            if (line.rfind("# ", 0) == 0)
                return trim(line.substr(2));
        return {};
    }

} // namespace

const char* contextSectionName(ContextSection s)
{
    switch (s) {
    case ContextSection::Rules:
        return "rules";
    case ContextSection::Hardware:
        return "hardware";
    case ContextSection::Models:
        return "models";
    case ContextSection::Notes:
        return "notes";
    }
    return "notes";
}

ContextDoc parseContextDoc(const std::string& text, const std::string& relativePath, const std::string& sourcePath)
{
    ContextDoc d;
    d.relativePath = relativePath;
    d.sourcePath = sourcePath;
    d.section = sectionOf(relativePath);
    std::istringstream in(text);
    std::string line;
    int lineNo = 0;
    std::string body;
    bool hasFrontMatter = false;
    if (std::getline(in, line)) {
        ++lineNo;
        if (trim(line) == "---") {
            hasFrontMatter = true;
        } else {
            body = line + "\n";
        }
    }
    if (hasFrontMatter) {
        bool closed = false;
        bool inAppliesTo = false;
        while (std::getline(in, line)) {
            ++lineNo;
            const std::string where = sourcePath + " line " + std::to_string(lineNo);
            if (trim(line) == "---") {
                closed = true;
                break;
            }
            if (trim(line).empty() || trim(line)[0] == '#')
                continue;
            const bool indented = line[0] == ' ' || line[0] == '\t';
            const auto colon = line.find(':');
            if (colon == std::string::npos)
                throw InputError(where + ": front matter expects 'key: value', got '" + trim(line) + "'");
            const std::string key = trim(line.substr(0, colon));
            const std::string value = trim(line.substr(colon + 1));
            if (indented && !inAppliesTo)
                throw InputError(where + ": indented key '" + key + "' outside 'applies-to:'");
            if (!indented)
                inAppliesTo = false;
            if (!indented && key == "applies-to") {
                if (!value.empty())
                    throw InputError(where + ": 'applies-to:' takes indented 'archs:' and 'tags:' lines");
                inAppliesTo = true;
            } else if (key == "archs") {
                d.archs = parseList(value, where);
                for (const auto& a : d.archs)
                    if (a != "*" && !archNumber(a))
                        throw InputError(where + ": '" + a + "' is not an architecture like sm_90 or sm_100a");
            } else if (key == "tags") {
                d.tags = parseList(value, where);
            } else if (!indented && key == "title") {
                d.title = value;
            } else if (!indented && key == "order") {
                try {
                    std::size_t used = 0;
                    d.order = std::stoi(value, &used);
                    if (used != value.size())
                        throw std::invalid_argument(value);
                } catch (const std::exception&) {
                    throw InputError(where + ": order must be an integer");
                }
            } else if (!indented && (key == "source" || key == "sources" || key == "verified" || key == "updated")) {
                // Provenance for human readers; not sent to the model.
            } else {
                throw InputError(where + ": unknown front-matter key '" + key
                    + "' (known: title, applies-to {archs, tags}, order, sources, updated)");
            }
        }
        if (!closed)
            throw InputError(sourcePath + ": front matter starting at line 1 is not closed by '---'");
    }
    std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    body += rest;
    // Trim leading blank lines and trailing whitespace.
    const auto first = body.find_first_not_of("\r\n");
    body = first == std::string::npos ? std::string() : body.substr(first);
    while (!body.empty() && (body.back() == '\n' || body.back() == ' ' || body.back() == '\r'))
        body.pop_back();
    d.body = body;
    if (d.title.empty())
        d.title = firstHeading(body);
    if (d.title.empty())
        d.title = relativePath;
    return d;
}

std::vector<ContextDoc> loadContextDocs(const std::vector<fs::path>& roots)
{
    std::vector<ContextDoc> docs;
    for (const auto& root : roots) {
        std::error_code ec;
        if (!fs::is_directory(root, ec))
            continue;
        std::vector<fs::path> files;
        for (fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
             it != end && !ec; it.increment(ec)) {
            if (it->is_regular_file() && it->path().extension() == ".md"
                && it->path().filename().string().rfind("README", 0) != 0)
                files.push_back(it->path());
        }
        std::sort(files.begin(), files.end());
        for (const auto& f : files) {
            const std::string rel = fs::relative(f, root).generic_string();
            ContextDoc d = parseContextDoc(readFile(f, 1u << 20), rel, f.string());
            auto same
                = std::find_if(docs.begin(), docs.end(), [&](const ContextDoc& o) { return o.relativePath == rel; });
            if (same != docs.end())
                *same = std::move(d);
            else
                docs.push_back(std::move(d));
        }
    }
    return docs;
}

std::vector<fs::path> contextRoots(const std::vector<fs::path>& extra)
{
    std::vector<fs::path> roots;
    roots.push_back(dataRoot() / "context");
    if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg)
        roots.push_back(fs::path(xdg) / "kernelloop" / "context");
    else if (const char* home = std::getenv("HOME"); home && *home)
        roots.push_back(fs::path(home) / ".config" / "kernelloop" / "context");
    if (const char* env = std::getenv("KL_CONTEXT_DIRS"); env && *env) {
        std::stringstream ss(env);
        std::string item;
        while (std::getline(ss, item, ':'))
            if (!item.empty())
                roots.emplace_back(item);
    }
    roots.insert(roots.end(), extra.begin(), extra.end());
    return roots;
}

bool docApplies(const ContextDoc& d, int arch, const std::vector<std::string>& problemTags)
{
    if (!d.archs.empty()) {
        bool any = false;
        for (const auto& a : d.archs)
            if (a == "*" || (arch != 0 && archNumber(a) == arch))
                any = true;
        if (!any)
            return false;
    }
    if (!d.tags.empty()) {
        bool any = false;
        for (const auto& t : d.tags)
            if (t == "*" || std::find(problemTags.begin(), problemTags.end(), t) != problemTags.end())
                any = true;
        if (!any)
            return false;
    }
    return true;
}

std::vector<ContextDoc> selectContext(
    const std::vector<ContextDoc>& docs, int arch, const std::vector<std::string>& problemTags)
{
    std::vector<ContextDoc> out;
    for (const auto& d : docs)
        if (docApplies(d, arch, problemTags))
            out.push_back(d);
    std::stable_sort(out.begin(), out.end(), [](const ContextDoc& a, const ContextDoc& b) {
        if (a.section != b.section)
            return int(a.section) < int(b.section);
        if (a.order != b.order)
            return a.order < b.order;
        return a.relativePath < b.relativePath;
    });
    return out;
}

} // namespace kl::prompt
