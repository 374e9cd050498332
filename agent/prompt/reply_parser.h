#pragma once
// The reply protocol: a reply holds exactly one fenced block, either
//
//   ```kl-candidate            a complete candidate in the @kl annotation format (core/kernel_spec.h)
//   ...
//   ```
//
// or
//
//   ```kl-diff                 a unified diff against the current candidate's source
//   --- a/candidate.cu
//   +++ b/candidate.cu
//   @@ -12,7 +12,9 @@
//   ...
//   ```
//
// plus optional "NOTE: ..." lines outside the block saying what changed and why. Parsing is strict:
// anything else is a ReplyError whose kind names the failure, and the message is what the model is
// told on the next request.
#include "core/errors.h"
#include "core/kernel_spec.h"

#include <string>

namespace kl::prompt {

class ReplyError : public InputError {
public:
    // kind: "malformed-reply", "diff-does-not-apply", "bad-annotations", "no-change"
    ReplyError(std::string kind, const std::string& message)
        : InputError(message)
        , m_kind(std::move(kind))
    {
    }
    const std::string& kind() const { return m_kind; }

private:
    std::string m_kind;
};

struct ParsedReply {
    enum class Kind { Candidate, Diff };
    Kind kind = Kind::Candidate;
    std::string note; // the NOTE lines, joined by spaces
    std::string block; // the block's text as sent
    std::string source; // the full candidate source (the diff applied to the base)
    KernelSpec spec;
};

// baseSource: the current candidate's source, needed for a diff (nullptr: diffs are refused).
ParsedReply parseReply(const std::string& reply, const std::string* baseSource);

// The protocol text given to the model; the parser and this text are kept side by side.
std::string replyProtocolText(bool haveBase, KernelLanguage language = KernelLanguage::Cuda);

} // namespace kl::prompt
