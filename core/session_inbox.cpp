#include "core/session_inbox.h"

#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_store.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <unistd.h>

namespace fs = std::filesystem;

namespace kl {

namespace {
    struct KindName {
        InboxRequest::Kind kind;
        const char* name;
    };
    constexpr KindName kKinds[] = {
        { InboxRequest::Kind::Review, "review" },
        { InboxRequest::Kind::Branch, "branch" },
        { InboxRequest::Kind::Hypothesis, "hypothesis" },
        { InboxRequest::Kind::Pause, "pause" },
        { InboxRequest::Kind::Resume, "resume" },
        { InboxRequest::Kind::Stop, "stop" },
    };

    InboxRequest requestFromJson(const Json& j, const std::string& where)
    {
        InboxRequest r;
        const std::string kind = jsonfield::string(j, "kind", where);
        bool known = false;
        for (const auto& k : kKinds)
            if (kind == k.name) {
                r.kind = k.kind;
                known = true;
            }
        if (!known)
            throw InputError(where + ".kind: unknown request '" + kind + "'");
        r.candidate = jsonfield::stringOr(j, "candidate", "", where);
        if ((r.kind == InboxRequest::Kind::Review || r.kind == InboxRequest::Kind::Branch) && !isSafeId(r.candidate))
            throw InputError(where + ".candidate: '" + r.candidate + "' is not a candidate id");
        r.approved = jsonfield::booleanOr(j, "approved", false, where);
        r.text = jsonfield::stringOr(j, "text", "", where);
        if (r.text.size() > 64 * 1024)
            throw InputError(where + ".text: longer than 64 KiB");
        if (r.kind == InboxRequest::Kind::Hypothesis && r.text.empty())
            throw InputError(where + ".text: a hypothesis needs text");
        return r;
    }
} // namespace

const char* inboxKindName(InboxRequest::Kind k)
{
    for (const auto& n : kKinds)
        if (n.kind == k)
            return n.name;
    return "review";
}

fs::path postInboxRequest(const fs::path& sessionDir, const InboxRequest& r)
{
    const fs::path inbox = sessionDir / "inbox";
    fs::create_directories(inbox);
    static std::atomic<unsigned> counter { 0 };
    static thread_local std::mt19937 rng { std::random_device {}() };
    // Names sort in posting order: time, then a per-process counter.
    char name[96];
    std::snprintf(name, sizeof name, "%013lld-%06d-%04u-%08x.json", static_cast<long long>(nowMs()),
        static_cast<int>(::getpid()), counter++ % 10000, static_cast<unsigned>(rng()));
    Json j = { { "kind", inboxKindName(r.kind) }, { "candidate", r.candidate }, { "approved", r.approved },
        { "text", r.text } };
    const fs::path path = inbox / name;
    writeFileAtomic(path, j.dump() + "\n");
    return path;
}

InboxBatch takeInboxRequests(const fs::path& sessionDir)
{
    InboxBatch batch;
    const fs::path inbox = sessionDir / "inbox";
    std::error_code ec;
    if (!fs::is_directory(inbox, ec))
        return batch;
    std::vector<fs::path> files;
    for (fs::directory_iterator it(inbox, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string n = it->path().filename().string();
        // Temporary files of a write in progress start with a dot.
        if (it->is_regular_file() && !n.empty() && n[0] != '.' && it->path().extension() == ".json")
            files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
        try {
            const Json j = Json::parse(readFile(f, 256 * 1024));
            batch.requests.push_back(requestFromJson(j, f.filename().string()));
            fs::remove(f, ec);
        } catch (const std::exception& e) {
            batch.errors.push_back(f.filename().string() + ": " + e.what());
            fs::create_directories(inbox / "rejected", ec);
            fs::rename(f, inbox / "rejected" / f.filename(), ec);
        }
    }
    return batch;
}

} // namespace kl
