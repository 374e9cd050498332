#include "agent/prompt/prompt_builder.h"

#include "agent/prompt/reply_parser.h"
#include "core/errors.h"
#include "core/session.h"
#include "core/session_store.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

namespace fs = std::filesystem;

namespace kl::prompt {

namespace {

    std::string fmt(const char* f, double v)
    {
        char buf[64];
        std::snprintf(buf, sizeof buf, f, v);
        return buf;
    }

    std::string bytesText(std::int64_t b)
    {
        if (b <= 0)
            return "unknown";
        if (b % (1024 * 1024) == 0)
            return std::to_string(b / (1024 * 1024)) + " MiB";
        if (b >= 1024 * 1024)
            return fmt("%.1f MiB", double(b) / (1024.0 * 1024.0));
        if (b % 1024 == 0)
            return std::to_string(b / 1024) + " KiB (" + std::to_string(b) + " B)";
        return std::to_string(b) + " B";
    }

    std::string archText(const DeviceInfo& d)
    {
        const int n = archNumber(d);
        if (n == 0)
            return "unknown architecture";
        std::string s = "sm_" + std::to_string(n);
        if (!d.arch.empty() && d.arch != s)
            s = d.arch;
        return s + ", compute capability " + std::to_string(n / 10) + "." + std::to_string(n % 10);
    }

    std::string tail(const std::string& s, std::size_t n)
    {
        return s.size() <= n ? s : "...\n" + s.substr(s.size() - n);
    }

    std::string head(const std::string& s, std::size_t n)
    {
        return s.size() <= n ? s : s.substr(0, n) + "\n... (" + std::to_string(s.size() - n) + " more bytes cut)";
    }

    // The compiler's complaints matter, not its banner: keep the lines that say error or warning.
    std::string compileLogExcerpt(const std::string& log)
    {
        std::istringstream in(log);
        std::string line, out;
        int kept = 0;
        while (std::getline(in, line) && kept < 25) {
            if (line.find("error") != std::string::npos || line.find("warning") != std::string::npos) {
                out += line + "\n";
                ++kept;
            }
        }
        return out.empty() ? tail(log, 1500) : out;
    }

    std::string deviceSection(const DeviceInfo& d)
    {
        std::ostringstream o;
        if (d.name.empty()) {
            o << "Target: " << archText(d) << ". No device is attached, so the numbers below come from the\n"
              << "architecture notes only; confirm limits on the real device.\n";
            return o.str();
        }
        o << "Target: " << d.name << " (" << archText(d) << "), as reported by the worker:\n";
        if (d.smCount)
            o << "- SMs: " << d.smCount << "\n";
        if (d.sharedPerBlockOptin)
            o << "- shared memory per block: " << bytesText(d.sharedPerBlock) << " by default, "
              << bytesText(d.sharedPerBlockOptin) << " with opt-in\n";
        if (d.sharedPerSm)
            o << "- shared memory per SM: " << bytesText(d.sharedPerSm) << "\n";
        if (d.regsPerSm)
            o << "- 32-bit registers per SM: " << d.regsPerSm << ", per block: " << d.regsPerBlock << "\n";
        if (d.maxThreadsPerSm)
            o << "- max threads per SM: " << d.maxThreadsPerSm << ", per block: " << d.maxThreadsPerBlock << "\n";
        if (d.l2Bytes)
            o << "- L2 cache: " << bytesText(d.l2Bytes) << "\n";
        if (d.globalMemBytes)
            o << "- device memory: " << fmt("%.0f GiB", double(d.globalMemBytes) / double(1ll << 30)) << "\n";
        if (d.measuredCopyBandwidth > 0)
            o << "- measured copy bandwidth (read+write): " << fmt("%.0f GB/s", d.measuredCopyBandwidth / 1e9) << "\n";
        if (d.smClockMHz)
            o << "- max SM clock: " << d.smClockMHz << " MHz\n";
        if (!d.nvrtcVersion.empty())
            o << "- NVRTC: " << d.nvrtcVersion << "\n";
        return o.str();
    }

    std::string roleSection(KernelLanguage language)
    {
        return std::string(language == KernelLanguage::Triton ? "You are a Triton kernel engineer"
                                                              : "You are a CUDA kernel engineer")
            + " working inside KernelLoop, a workbench where an engineer and an\n"
              "agent improve one GPU kernel together. The engineer reads profiles and states a hypothesis; you\n"
              "implement it as a candidate kernel. A trusted harness that you cannot see or change compiles the\n"
              "candidate, checks it against a reference implementation on many shapes (including random held-out\n"
              "shapes from the whole validity range and several input distributions), and times it against the\n"
              "baseline with fresh inputs. Only candidates that are correct everywhere and measurably faster are\n"
              "kept; a built-in tuner then searches the values of your @kl:param parameters.\n"
              "\n"
              "Ground rules (the harness enforces them; a candidate that breaks one is rejected with a reason):\n"
              "- Compute the full result for every valid shape. Do not special-case the shapes you are shown.\n"
              "- Device code only: no host code, no extra streams, no graph capture, no timing code, no caching of\n"
              "  results across calls, no reading memory you were not passed.\n"
              "- Keep the declared precision: compute in the problem's dtypes with at least the reference's\n"
              "  accumulation precision.\n"
              "- Use only instructions that exist on the target architecture (see the device facts).\n"
              "- Say what you are unsure of in the NOTE line rather than guessing silently.\n";
    }

    std::string docsText(const std::vector<ContextDoc>& docs, ContextSection section)
    {
        std::string out;
        for (const auto& d : docs) {
            if (d.section != section)
                continue;
            out += "## " + d.title + "\n(from context/" + d.relativePath + ")\n\n" + d.body + "\n\n";
        }
        while (!out.empty() && out.back() == '\n')
            out.pop_back();
        return out;
    }

    std::string problemSection(const Problem& p)
    {
        std::ostringstream o;
        o << "Problem: " << p.name << "\n";
        if (!p.description.empty())
            o << p.description << "\n";
        if (!p.tags.empty()) {
            o << "Tags:";
            for (const auto& t : p.tags)
                o << " " << t;
            o << "\n";
        }
        o << "\nTensors, in the order the reference kernel takes them:\n";
        for (const auto& t : p.tensors) {
            o << "- " << t.name << ": " << dtypeName(t.dtype) << " [";
            for (std::size_t i = 0; i < t.shape.size(); ++i)
                o << (i ? ", " : "") << t.shape[i].text();
            o << "] " << (t.role == TensorRole::InOut ? "input and output, updated in place" : tensorRoleName(t.role))
              << ", row-major, contiguous";
            switch (t.values.kind) {
            case IntValues::Kind::Any:
                break;
            case IntValues::Kind::Range:
                o << "; values in [" << t.values.low.text() << ", " << t.values.high.text() << ")";
                break;
            case IntValues::Kind::Distinct:
                o << "; each row holds distinct values in [0, " << t.values.high.text() << ")"
                  << (t.values.padFraction > 0 ? ", rows may end in -1 padding" : "")
                  << " (entries past the range are -1)";
                break;
            case IntValues::Kind::Permutation:
                o << "; a permutation of [0, its element count)";
                break;
            case IntValues::Kind::Lengths:
                o << "; lengths in [" << t.values.low.text() << ", " << t.values.high.text()
                  << "], differing per entry";
                break;
            }
            o << "\n";
        }
        if (!p.scalars.empty()) {
            o << "Scalars:\n";
            for (const auto& s : p.scalars)
                o << "- " << s.name << ": " << dtypeName(s.dtype) << " = "
                  << (s.formula ? s.formula->text() : fmt("%g", s.value)) << "\n";
        }
        o << "\nValidity range (the kernel must be correct for every shape in it):\n";
        for (const auto& d : p.dims) {
            if (d.constant) {
                o << "- " << d.name << " = " << d.min << " (a constant of the problem)\n";
                continue;
            }
            o << "- " << d.name << " in [" << d.min << ", " << d.max << "]";
            if (d.multipleOf > 1)
                o << ", a multiple of " << d.multipleOf;
            o << "\n";
        }
        for (const auto& c : p.dimConstraints)
            o << "- " << c.text() << "\n";
        o << "Dims reach the kernel as int arguments named as above.\n";
        if (!p.tuningShapes.empty()) {
            o << "\nShapes the objective is timed on (weight in parentheses); correctness is also checked on\n"
                 "other shapes from the validity range that are not shown:\n";
            for (const auto& s : p.tuningShapes)
                o << "- " << s.label() << " (" << fmt("%g", s.weight) << ")\n";
        }
        std::vector<DType> outTypes;
        for (const auto& t : p.tensors)
            if (writesOutput(t.role) && std::find(outTypes.begin(), outTypes.end(), t.dtype) == outTypes.end())
                outTypes.push_back(t.dtype);
        for (auto t : outTypes) {
            const Tolerance tol = p.toleranceFor(t);
            o << "Tolerance for " << dtypeName(t) << " outputs: relative L2 error <= " << fmt("%g", tol.relL2)
              << ", max abs error <= " << fmt("%g", tol.maxAbs) << "\n";
        }
        if (!p.flops.empty() || !p.bytes.empty())
            o << "Work per call: flops = " << (p.flops.empty() ? "?" : p.flops.text())
              << ", fewest bytes moved = " << (p.bytes.empty() ? "?" : p.bytes.text()) << "\n";
        return o.str();
    }

    // Referee and compiler messages may quote a held-out shape or a seed; the agent must not see either.
    std::string hideSecrets(std::string text, const Evaluation& e)
    {
        auto replaceAll = [&](const std::string& what, const std::string& with) {
            if (what.empty())
                return;
            for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + with.size()))
                text.replace(pos, what.size(), with);
        };
        for (const auto& s : e.shapes) {
            if (s.heldOut) {
                replaceAll(s.shape.label(), "<held-out shape>");
                std::string spaced;
                for (const auto& [k, v] : s.shape.dims)
                    spaced += (spaced.empty() ? "" : " ") + k + "=" + std::to_string(v);
                replaceAll(spaced, "<held-out shape>");
            }
            for (const auto& c : s.checks)
                if (c.seed > 999) // short numbers are too common to be a tell
                    replaceAll(std::to_string(c.seed), "<seed>");
        }
        return text;
    }

    std::vector<VerdictReason> hideSecrets(std::vector<VerdictReason> reasons, const Evaluation& e)
    {
        for (auto& r : reasons)
            r.message = hideSecrets(r.message, e);
        return reasons;
    }

    std::string measurementsText(const Evaluation& e, const DeviceInfo& d)
    {
        std::ostringstream o;
        o << "Verdict: " << verdictName(e.verdict);
        if (e.objective > 0)
            o << ", objective " << fmt("%.3f", e.objective) << " [" << fmt("%.3f", e.objectiveCiLow) << ", "
              << fmt("%.3f", e.objectiveCiHigh) << "] (95% CI)";
        o << "\n";
        bool header = false;
        for (const auto& s : e.shapes) {
            if (s.heldOut)
                continue; // held-out shapes stay hidden from the agent
            if (!header) {
                o << "Per shape" << (d.name.empty() ? "" : " on " + d.name)
                  << " (median of timed samples; speedup = baseline / candidate):\n";
                header = true;
            }
            o << "- " << s.shape.label() << ": " << (s.correct ? "correct" : "WRONG");
            double worstRel = 0;
            for (const auto& c : s.checks)
                worstRel = std::max(worstRel, c.relL2);
            if (!s.checks.empty())
                o << " (worst rel L2 " << fmt("%.2e", worstRel) << ")";
            if (s.timing)
                o << ", " << fmt("%.2f", s.timing->medianUs) << " us";
            if (s.baselineTiming)
                o << " vs baseline " << fmt("%.2f", s.baselineTiming->medianUs) << " us";
            if (s.speedup > 0)
                o << ", speedup " << fmt("%.3f", s.speedup) << " [" << fmt("%.3f", s.speedupCiLow) << ", "
                  << fmt("%.3f", s.speedupCiHigh) << "]";
            o << "\n";
        }
        const int hidden
            = int(std::count_if(e.shapes.begin(), e.shapes.end(), [](const ShapeResult& s) { return s.heldOut; }));
        if (hidden > 0) {
            const int hiddenWrong = int(std::count_if(
                e.shapes.begin(), e.shapes.end(), [](const ShapeResult& s) { return s.heldOut && !s.correct; }));
            o << "Held-out shapes: " << hidden << " checked, " << hiddenWrong << " wrong.\n";
        }
        for (const auto& k : e.compile.kernels)
            o << "Kernel " << k.kernel << ": " << k.registers << " registers, " << k.staticSharedBytes
              << " B static shared, spills " << k.spillStores << " stores / " << k.spillLoads << " loads\n";
        for (const auto& r : hideSecrets(e.reasons, e))
            o << "Referee: " << r.rule << ": " << r.message << (r.line ? " (line " + std::to_string(r.line) + ")" : "")
              << (r.blocking ? "" : " [flag]") << "\n";
        return o.str();
    }

    std::string failuresText(const std::vector<FailedAttempt>& all, int maxFailures)
    {
        const std::size_t n = std::min<std::size_t>(all.size(), std::size_t(std::max(0, maxFailures)));
        std::ostringstream o;
        int i = 1;
        for (std::size_t k = all.size() - n; k < all.size(); ++k, ++i) {
            const auto& f = all[k];
            o << i << ". " << f.label << ": " << f.kind;
            if (!f.hypothesis.empty())
                o << " (tried: " << head(f.hypothesis, 200) << ")";
            o << "\n";
            for (const auto& r : f.reasons)
                o << "   - " << r.rule << ": " << r.message << (r.line ? " (line " + std::to_string(r.line) + ")" : "")
                  << "\n";
            if (!f.detail.empty()) {
                std::string detail = head(f.detail, 2000);
                std::string indented;
                std::istringstream in(detail);
                std::string line;
                while (std::getline(in, line))
                    indented += "     " + line + "\n";
                o << indented;
            }
        }
        return o.str();
    }

} // namespace

std::string Prompt::system() const
{
    std::string s;
    for (const auto& sec : sections)
        if (sec.system)
            s += "# " + sec.title + "\n\n" + sec.text + "\n\n";
    while (!s.empty() && s.back() == '\n')
        s.pop_back();
    return s + "\n";
}

std::string Prompt::user() const
{
    std::string s;
    for (const auto& sec : sections)
        if (!sec.system)
            s += "# " + sec.title + "\n\n" + sec.text + "\n\n";
    while (!s.empty() && s.back() == '\n')
        s.pop_back();
    return s + "\n";
}

std::string Prompt::render() const
{
    return "======== system message ========\n" + system() + "\n======== user message ========\n" + user();
}

Prompt buildPrompt(const PromptInputs& in)
{
    Prompt p;
    auto add = [&](std::string title, std::string text, bool system) {
        while (!text.empty() && text.back() == '\n')
            text.pop_back();
        if (!text.empty())
            p.sections.push_back({ std::move(title), std::move(text), system });
    };
    add("Role and rules", roleSection(in.language), true);
    add("Rules from context/rules", docsText(in.context, ContextSection::Rules), true);
    std::string device = deviceSection(in.device);
    const std::string hw = docsText(in.context, ContextSection::Hardware);
    if (!hw.empty())
        device += "\n" + hw;
    else
        device += "\nNo architecture notes in context/hardware apply to this target.";
    add("Device facts", device, true);
    add("Model-architecture facts", docsText(in.context, ContextSection::Models), true);
    add("Kernel technique and user notes", docsText(in.context, ContextSection::Notes), true);
    add("Reply protocol", replyProtocolText(in.base.has_value(), in.language), true);

    if (in.problem) {
        add("Problem", problemSection(*in.problem), false);
        if (!in.referenceSource.empty()) {
            std::string ref = head(in.referenceSource, 16000);
            while (!ref.empty() && ref.back() == '\n')
                ref.pop_back();
            add("Reference implementation (trusted; it defines the semantics, it is not the baseline)",
                "```cuda\n" + ref + "\n```", false);
        }
    }
    if (in.base) {
        const Candidate& c = *in.base;
        std::ostringstream o;
        o << "Candidate " << c.id << " (by " << authorName(c.author) << (c.agent.empty() ? "" : ", " + c.agent)
          << ", status " << statusName(c.status) << "). Diffs apply to this source.\n";
        if (!c.params.empty()) {
            o << (in.baseEvaluation ? "Parameter values it was measured with:" : "Parameter values (defaults):");
            for (const auto& [k, v] : c.params)
                o << " " << k << "=" << v;
            o << "\n";
        }
        o << (detectLanguage(c.source) == KernelLanguage::Triton ? "\n```python\n" : "\n```cuda\n") << c.source
          << (c.source.empty() || c.source.back() == '\n' ? "" : "\n") << "```\n";
        if (in.baseEvaluation)
            o << "\n" << measurementsText(*in.baseEvaluation, in.device);
        else
            o << "\nNot measured yet.\n";
        if (in.bestId && *in.bestId != c.id)
            o << "The session's best so far is " << *in.bestId << " with objective " << fmt("%.3f", in.bestObjective)
              << " (" << in.objectiveName << ").\n";
        add("Current candidate", o.str(), false);
    }
    if (!in.bottleneckSummary.empty())
        add("Profiler bottleneck summary", in.bottleneckSummary, false);
    if (!in.failures.empty())
        add("Recent failed attempts (oldest first)", failuresText(in.failures, in.maxFailures), false);

    std::ostringstream task;
    if (in.hypothesis && !in.hypothesis->text.empty()) {
        task << "Hypothesis " << (in.hypothesis->id.empty() ? std::string() : in.hypothesis->id + " ")
             << "from the engineer:\n\n> " << in.hypothesis->text << "\n\n"
             << "Implement this hypothesis as a change to the current candidate. If it cannot work on this\n"
                "target, say why in the NOTE line and send the closest change that can.";
    } else {
        task << "No hypothesis from the engineer this time. Propose the single change you judge most likely to\n"
                "make the current candidate faster on this target, and say why in the NOTE line.";
    }
    if (!in.failures.empty())
        task << "\nDo not repeat a failed attempt listed above.";
    task << "\nExpose the choices that depend on shape or hardware as @kl:param parameters for the tuner.\n"
            "Answer with exactly one ```kl-candidate or ```kl-diff block as the reply protocol says.";
    add("Task", task.str(), false);
    return p;
}

std::vector<FailedAttempt> failuresFromSession(const Session& s, std::size_t max)
{
    std::vector<FailedAttempt> out;
    const auto& order = s.tree.order();
    for (auto it = order.rbegin(); it != order.rend() && out.size() < max; ++it) {
        const Candidate& c = s.tree.at(*it);
        if (c.author == Author::Tuner || c.author == Author::Reference)
            continue;
        std::string kind;
        switch (c.status) {
        case CandidateStatus::Rejected:
            kind = "rejected";
            break;
        case CandidateStatus::CompileFailed:
            kind = "compile-failed";
            break;
        case CandidateStatus::Crashed:
            kind = "crashed";
            break;
        case CandidateStatus::TimedOut:
            kind = "timed-out";
            break;
        default:
            continue;
        }
        FailedAttempt f;
        f.label = c.id + (c.parentId.empty() ? "" : " (from " + c.parentId + ")");
        f.kind = kind;
        f.timeMs = c.createdMs;
        if (auto h = s.hypotheses.find(c.hypothesisId); h != s.hypotheses.end())
            f.hypothesis = h->second.text;
        if (auto e = s.evaluations.find(c.id); e != s.evaluations.end()) {
            f.reasons = hideSecrets(e->second.reasons, e->second);
            if (c.status == CandidateStatus::CompileFailed)
                f.detail = hideSecrets(compileLogExcerpt(e->second.compile.log), e->second);
        }
        if (f.reasons.empty() && !c.statusReason.empty())
            f.detail = f.detail.empty() ? c.statusReason : c.statusReason + "\n" + f.detail;
        out.push_back(std::move(f));
    }
    std::reverse(out.begin(), out.end());
    return out;
}

std::optional<Candidate> templateCandidate(const Problem& p, int arch)
{
    if (p.folder.empty() || p.templateFor(arch).empty())
        return std::nullopt;
    const fs::path file = fs::path(p.folder) / p.templateFor(arch);
    std::error_code ec;
    if (!fs::is_regular_file(file, ec))
        return std::nullopt;
    Candidate c;
    c.id = "template";
    c.source = readFile(file, 4u << 20);
    c.author = Author::Human;
    c.agent = "problem:template";
    try {
        c.params = parseKernelSpec(c.source).defaults();
    } catch (const InputError&) {
        // Shown as it is; the model's reply is checked on its own.
    }
    return c;
}

void fillFromSession(PromptInputs& in, const AgentContext& ctx)
{
    if (ctx.hypothesis)
        in.hypothesis = ctx.hypothesis;
    in.bottleneckSummary = ctx.bottleneckSummary;
    if (!ctx.session || ctx.session->tree.empty()) {
        if (!in.base && in.problem)
            in.base = templateCandidate(*in.problem, archNumber(in.device));
        if (!ctx.session)
            return;
    }
    const Session& s = *ctx.session;
    in.objectiveName = s.settings.objective;
    if (in.device.empty() && !s.device.empty())
        in.device = s.device;
    CandidateId baseId = ctx.branchFrom;
    if (baseId.empty())
        baseId = s.tree.head();
    if (!baseId.empty() && s.tree.contains(baseId)) {
        in.base = s.tree.at(baseId);
        if (auto e = s.evaluations.find(baseId); e != s.evaluations.end())
            in.baseEvaluation = e->second;
    }
    const auto best = s.tree.best([&](const Candidate& c) -> std::optional<double> {
        if (c.status != CandidateStatus::Accepted)
            return std::nullopt;
        auto e = s.evaluations.find(c.id);
        if (e == s.evaluations.end())
            return std::nullopt;
        return e->second.objective;
    });
    if (best) {
        in.bestId = *best;
        in.bestObjective = s.evaluations.at(*best).objective;
    }
}

} // namespace kl::prompt
