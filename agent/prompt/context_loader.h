#pragma once
// context/ markdown for prompts: each file may start with front matter saying what it applies to.
//
//   ---
//   title: NVIDIA Hopper (sm_90): H100, H200, H800, H20
//   applies-to:
//     archs: [sm_90, sm_90a]
//     tags: []
//   order: 10
//   ---
//
// archs: the compute capabilities the file is about ("sm_90" and "sm_90a" both mean CC 9.0; "*" all);
// tags: problem tags (a file applies when the problem has any of them). An empty list means "any".
// The folder says the section: rules/, hardware/, models/, anything else is the user's own notes.
// Several roots are read in order (shipped, then the user's); a later file with the same relative
// path replaces an earlier one, so users can correct a shipped fact without editing it.
#include "core/device.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kl::prompt {

enum class ContextSection { Rules, Hardware, Models, Notes };
const char* contextSectionName(ContextSection s);

struct ContextDoc {
    std::string relativePath; // "hardware/hopper.md"
    std::string sourcePath; // where it was read from
    ContextSection section = ContextSection::Notes;
    std::string title;
    std::vector<std::string> archs;
    std::vector<std::string> tags;
    int order = 100;
    std::string body; // without the front matter
};

// Parses one file's text; throws InputError naming path and line for malformed front matter.
ContextDoc parseContextDoc(const std::string& text, const std::string& relativePath, const std::string& sourcePath);

// Reads every *.md below each root (missing roots are skipped). Throws InputError on a bad file.
std::vector<ContextDoc> loadContextDocs(const std::vector<std::filesystem::path>& roots);

// The shipped context/ folder, then $XDG_CONFIG_HOME/kernelloop/context (or ~/.config/...), then each
// entry of $KL_CONTEXT_DIRS (colon-separated), then extra.
std::vector<std::filesystem::path> contextRoots(const std::vector<std::filesystem::path>& extra = {});

using kl::archNumber; // core/device.h

bool docApplies(const ContextDoc& d, int arch, const std::vector<std::string>& problemTags);
// The documents that apply, ordered rules, hardware, models, notes; then by order, then by path.
std::vector<ContextDoc> selectContext(
    const std::vector<ContextDoc>& docs, int arch, const std::vector<std::string>& problemTags);

} // namespace kl::prompt
