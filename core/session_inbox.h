#pragma once
// Requests to a session that another process is writing (kloop run): the workbench cannot append to the
// journal itself (one writer per session), so it drops requests into <session>/inbox/ and the writer
// applies them through its research loop. Each request is one file, written atomically.
#include "core/candidate.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kl {

struct InboxRequest {
    enum class Kind { Review, Branch, Hypothesis, Pause, Resume, Stop };
    Kind kind = Kind::Review;
    CandidateId candidate; // Review, Branch
    bool approved = false; // Review
    std::string text; // the review's reason, the hypothesis, or why to branch / stop
};

const char* inboxKindName(InboxRequest::Kind k);

// Writes one request file; returns its path. Throws on I/O errors.
std::filesystem::path postInboxRequest(const std::filesystem::path& sessionDir, const InboxRequest& r);

struct InboxBatch {
    std::vector<InboxRequest> requests; // in the order they were posted
    std::vector<std::string> errors; // malformed files, named; they are moved aside, never retried
};

// Takes every pending request (each file is removed once read) for the session's writer.
InboxBatch takeInboxRequests(const std::filesystem::path& sessionDir);

} // namespace kl
