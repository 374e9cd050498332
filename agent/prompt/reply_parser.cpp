#include "agent/prompt/reply_parser.h"

#include "core/diff.h"

#include <cctype>
#include <optional>
#include <sstream>
#include <vector>

namespace kl::prompt {

namespace {

    constexpr std::size_t kMaxBlockBytes = 256 * 1024;

    std::string trim(const std::string& s)
    {
        const auto b = s.find_first_not_of(" \t\r\n");
        if (b == std::string::npos)
            return {};
        const auto e = s.find_last_not_of(" \t\r\n");
        return s.substr(b, e - b + 1);
    }

    // Whether code outside the // comment lines mentions name as a whole identifier.
    bool codeMentions(const std::string& source, const std::string& name)
    {
        std::istringstream in(source);
        std::string line;
        auto isIdent = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
        while (std::getline(in, line)) {
            if (trim(line).rfind("//", 0) == 0)
                continue;
            for (auto pos = line.find(name); pos != std::string::npos; pos = line.find(name, pos + 1)) {
                const bool startOk = pos == 0 || !isIdent(line[pos - 1]);
                const bool endOk = pos + name.size() >= line.size() || !isIdent(line[pos + name.size()]);
                if (startOk && endOk)
                    return true;
            }
        }
        return false;
    }

    struct Block {
        std::string info;
        std::vector<std::string> lines;
        int openLine = 0;
    };

} // namespace

ParsedReply parseReply(const std::string& reply, const std::string* baseSource)
{
    std::vector<Block> klBlocks;
    std::vector<std::string> otherFences;
    std::vector<std::string> notes;
    std::istringstream in(reply);
    std::string raw;
    int lineNo = 0;
    std::optional<Block> open;
    bool openIsKl = false;
    while (std::getline(in, raw)) {
        ++lineNo;
        if (!raw.empty() && raw.back() == '\r')
            raw.pop_back();
        const std::string t = trim(raw);
        if (open) {
            if (t == "```") {
                if (openIsKl)
                    klBlocks.push_back(std::move(*open));
                open.reset();
            } else {
                open->lines.push_back(raw);
            }
            continue;
        }
        if (t.rfind("```", 0) == 0) {
            Block b;
            b.info = trim(t.substr(3));
            b.openLine = lineNo;
            openIsKl = b.info == "kl-candidate" || b.info == "kl-diff";
            if (!openIsKl && b.info.rfind("kl-", 0) == 0)
                throw ReplyError("malformed-reply",
                    "line " + std::to_string(lineNo) + ": unknown block type '```" + abbreviate(b.info)
                        + "' (use ```kl-candidate or ```kl-diff)");
            if (!openIsKl)
                otherFences.push_back(b.info.empty() ? "```" : "```" + b.info);
            open = std::move(b);
            continue;
        }
        if (t.rfind("NOTE:", 0) == 0)
            notes.push_back(trim(t.substr(5)));
    }
    if (open && openIsKl)
        throw ReplyError("malformed-reply",
            "the ```" + open->info + " block opened at line " + std::to_string(open->openLine)
                + " is never closed (a line with only ``` must end it; the reply may "
                  "have been cut off by the output token limit)");
    if (klBlocks.empty()) {
        std::string msg = "the reply contains no ```kl-candidate or ```kl-diff block";
        if (!otherFences.empty())
            msg += " (it has a " + abbreviate(otherFences.front())
                + " block: label the block ```kl-candidate or ```kl-diff)";
        throw ReplyError("malformed-reply", msg);
    }
    if (klBlocks.size() > 1)
        throw ReplyError("malformed-reply",
            "the reply contains " + std::to_string(klBlocks.size())
                + " kl blocks; send exactly one ```kl-candidate or ```kl-diff block");

    const Block& b = klBlocks.front();
    ParsedReply out;
    for (const auto& n : notes)
        out.note += (out.note.empty() ? "" : " ") + n;
    for (const auto& l : b.lines)
        out.block += l + "\n";
    if (trim(out.block).empty())
        throw ReplyError("malformed-reply", "the ```" + b.info + " block is empty");
    if (out.block.size() > kMaxBlockBytes)
        throw ReplyError("malformed-reply",
            "the block is " + std::to_string(out.block.size()) + " bytes; the limit is "
                + std::to_string(kMaxBlockBytes));

    if (b.info == "kl-diff") {
        out.kind = ParsedReply::Kind::Diff;
        if (!baseSource)
            throw ReplyError("malformed-reply",
                "a ```kl-diff needs a current candidate, and there is none: send a "
                "complete ```kl-candidate");
        try {
            out.source = applyUnifiedDiff(*baseSource, out.block);
        } catch (const InputError& e) {
            throw ReplyError("diff-does-not-apply",
                std::string("the diff does not apply to the current candidate: ") + e.what()
                    + ". Copy context and removed lines exactly from the current source, or send a "
                      "complete ```kl-candidate");
        }
        if (out.source == *baseSource)
            throw ReplyError("no-change", "the diff changes nothing");
    } else {
        out.kind = ParsedReply::Kind::Candidate;
        out.source = out.block;
        if (baseSource && out.source == *baseSource)
            throw ReplyError("no-change", "the candidate is identical to the current one");
    }
    try {
        out.spec = parseKernelSpec(out.source);
    } catch (const InputError& e) {
        throw ReplyError("bad-annotations", std::string("the candidate's @kl annotations are invalid: ") + e.what());
    } catch (const std::exception& e) {
        throw ReplyError("bad-annotations", std::string("the candidate's @kl annotations are invalid: ") + e.what());
    }
    if (out.spec.launches.empty())
        throw ReplyError(
            "bad-annotations", "the candidate declares no '// @kl:launch' line, so the harness cannot run it");
    // A Triton candidate (a @triton.jit line) is the other language's form of a kernel; its helper checks the def.
    if (out.spec.language == KernelLanguage::Cuda && out.source.find("__global__") == std::string::npos)
        throw ReplyError("bad-annotations", "the candidate has no __global__ kernel");
    for (const auto& step : out.spec.launches)
        if (!codeMentions(out.source, step.kernel))
            throw ReplyError("bad-annotations",
                "@kl:launch on line " + std::to_string(step.line) + " names kernel '" + abbreviate(step.kernel)
                    + "', which the source does not define");
    return out;
}

namespace {

    // The Triton form of the protocol: the same two blocks, a @triton.jit kernel with '# @kl:' annotations.
    std::string tritonReplyProtocolText(bool haveBase)
    {
        std::string t
            = "Reply with a short explanation if you like, then exactly ONE fenced block, in one of two forms.\n"
              "\n"
              "Form 1, a complete candidate: the whole Triton file: `import triton`, `import triton.language as tl`,\n"
              "the '# @kl:' annotations and ONE @triton.jit kernel (helper @triton.jit functions may follow). No host\n"
              "code: no torch, no launch code, no @triton.autotune/@triton.heuristics, no module-level variables, no\n"
              "print or tl.device_print, no timers. Tunables are tl.constexpr parameters named like @kl:param.\n"
              "\n"
              "```kl-candidate\n"
              "import triton\n"
              "import triton.language as tl\n"
              "\n"
              "# @kl:param BLOCK = 4096 in [1024, 2048, 4096, 8192]\n"
              "# @kl:param WARPS = 8 in [4, 8, 16]\n"
              "# @kl:launch my_kernel grid=(T) num_warps=WARPS num_stages=2 args=(y, x, w, T, H, eps)\n"
              "\n"
              "\n"
              "@triton.jit\n"
              "def my_kernel(y, x, w, T, H, eps, BLOCK: tl.constexpr):\n"
              "    ...\n"
              "```\n"
              "\n";
        if (haveBase)
            t += "Form 2, a unified diff against the CURRENT CANDIDATE source shown above (context and removed\n"
                 "lines copied exactly; hunk headers '@@ -a,b +c,d @@'), with headers --- a/candidate.py and\n"
                 "+++ b/candidate.py, in a ```kl-diff block. Prefer a diff for small changes.\n";
        else
            t += "(There is no current candidate yet, so a diff is not possible: send Form 1.)\n";
        t += "\n"
             "Annotations (each on its own '# @kl:' comment line):\n"
             "- `# @kl:param NAME = DEFAULT in [v1, v2, ...]`: a tunable integer, passed to the kernel's\n"
             "  tl.constexpr parameter of that name. The tuner searches these values after your change is accepted.\n"
             "- `# @kl:constraint EXPR`: must hold for a parameter choice (and shape) to be valid.\n"
             "- `# @kl:workspace NAME bytes=EXPR init=zero|poison`: scratch memory the harness allocates.\n"
             "- `# @kl:launch KERNEL grid=(X[,Y[,Z]]) num_warps=EXPR num_stages=EXPR args=(...)`: the one launch.\n"
             "  grid may use shape dims and parameters; num_warps (a power of 2) and num_stages only parameters.\n"
             "  args name the problem's tensors, dims, scalars and workspaces, in the order of the kernel's\n"
             "  non-constexpr parameters. Tensors arrive as pointers of their dtype, 16-byte aligned; dims as int32.\n"
             "The harness compiles it ahead of time with Triton's own compiler for the target architecture and\n"
             "launches the CUBIN itself (block = 32 * num_warps threads; Triton sizes the shared memory).\n"
             "\n"
             "Put one line starting with `NOTE:` outside the block saying what you changed and why.\n"
             "A reply without exactly one such block, a diff that does not apply, or annotations that do not\n"
             "parse is rejected and you will be shown the error.\n";
        return t;
    }

} // namespace

std::string replyProtocolText(bool haveBase, KernelLanguage language)
{
    if (language == KernelLanguage::Triton)
        return tritonReplyProtocolText(haveBase);
    std::string t = "Reply with a short explanation if you like, then exactly ONE fenced block, in one of two forms.\n"
                    "\n"
                    "Form 1, a complete candidate: the whole .cu file, device code only (no host code, no main, no\n"
                    "cudaMalloc, no streams, no timing), with its @kl annotations:\n"
                    "\n"
                    "```kl-candidate\n"
                    "// @kl:param BLOCK = 256 in [128, 256, 512]\n"
                    "// @kl:constraint H % 4 == 0\n"
                    "// @kl:launch my_kernel grid=(T) block=(BLOCK) smem=0 args=(y, x, w, T, H, eps)\n"
                    "extern \"C\" __global__ void my_kernel(...) { ... }\n"
                    "```\n"
                    "\n";
    if (haveBase)
        t += "Form 2, a unified diff against the CURRENT CANDIDATE source shown above (context and removed\n"
             "lines copied exactly; hunk headers '@@ -a,b +c,d @@'):\n"
             "\n"
             "```kl-diff\n"
             "--- a/candidate.cu\n"
             "+++ b/candidate.cu\n"
             "@@ -10,3 +10,4 @@\n"
             " unchanged line\n"
             "-old line\n"
             "+new line\n"
             "```\n"
             "\n"
             "Prefer a diff for small changes; send a complete candidate for a rewrite.\n";
    else
        t += "(There is no current candidate yet, so a diff is not possible: send Form 1.)\n";
    t += "\n"
         "Annotations (each on its own '// @kl:' comment line):\n"
         "- `// @kl:param NAME = DEFAULT in [v1, v2, ...]`: a tunable integer, reaching the code as a\n"
         "  compile-time define (-DNAME=value). The tuner searches these values after your change is accepted.\n"
         "- `// @kl:constraint EXPR`: must hold for a parameter choice (and shape) to be valid, e.g. `BLOCK % 32 == "
         "0`.\n"
         "- `// @kl:workspace NAME bytes=EXPR init=zero|poison`: scratch memory the harness allocates.\n"
         "- `// @kl:launch KERNEL grid=(X[,Y[,Z]]) block=(X[,Y[,Z]]) smem=EXPR args=(...)`: one line per launch,\n"
         "  in order. Expressions may use shape dims, parameters and min max ceil_div div floor ceil round\n"
         "  abs log2 sqrt pow next_pow2. args name the problem's tensors, dims, scalars and workspaces.\n"
         "Kernels are compiled with NVRTC for the target architecture; @kl:launch names a kernel by its C++\n"
         "name (extern \"C\" avoids any doubt); smem= is the dynamic shared memory of that launch in bytes.\n"
         "\n"
         "Put one line starting with `NOTE:` outside the block saying what you changed and why.\n"
         "A reply without exactly one such block, a diff that does not apply, or annotations that do not\n"
         "parse is rejected and you will be shown the error.\n";
    return t;
}

} // namespace kl::prompt
