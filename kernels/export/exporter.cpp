#include "kernels/export/exporter.h"

#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_store.h"
#include "kernels/export/bundle_gen.h"
#include "kernels/export/c_expr.h"
#include "kernels/triton/triton_compiler.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <regex>
#include <set>
#include <unistd.h>

extern char** environ;

namespace kl::exporter {

using detail::BundleModel;
using detail::KernelImpl;

namespace {

    namespace fs = std::filesystem;

    // Library baselines the exporter can emit a call for; others fall back to the reference kernel.
    bool isCublasGemm(const std::string& lib)
    {
        return lib.rfind("cublas_gemm", 0) == 0;
    }

    // A bundle is written into a staging folder beside its destination and swapped in by rename, so a kill at any
    // instant leaves the old bundle or the new one at the destination, never a mix. The staging folder carries the
    // marker from its first write on; what a crash leaves behind is recognisable by name and marker, and the next
    // export to the same destination clears it.
    constexpr const char* kPartialMarker = ".kl-export-partial";

    std::string stagingPrefix(const fs::path& out)
    {
        return "." + out.filename().string() + ".kl-export-";
    }

    bool isExportedBundle(const fs::path& dir)
    {
        std::error_code ec;
        return fs::exists(dir / "manifest.json", ec) || fs::exists(dir / kPartialMarker, ec);
    }

    void clearLeftoverStaging(const fs::path& out)
    {
        std::error_code ec;
        const std::string prefix = stagingPrefix(out);
        for (const auto& entry : fs::directory_iterator(out.parent_path(), ec)) {
            const std::string name = entry.path().filename().string();
            if (name.rfind(prefix, 0) == 0 && entry.is_directory(ec))
                fs::remove_all(entry.path(), ec);
        }
    }

    void writeBundleBeside(const fs::path& out, const std::map<std::string, std::string>& files)
    {
        std::error_code ec;
        fs::create_directories(out.parent_path(), ec);
        if (ec)
            throw InputError("export: cannot create " + out.parent_path().string() + ": " + ec.message());
        clearLeftoverStaging(out);
        const fs::path staging = out.parent_path() / (stagingPrefix(out) + std::to_string(::getpid()));
        fs::remove_all(staging, ec);
        fs::create_directories(staging, ec);
        if (ec)
            throw InputError("export: cannot create " + staging.string() + ": " + ec.message());
        writeFileAtomic(staging / kPartialMarker,
            "an interrupted kloop export; the next export to " + out.filename().string() + " removes it\n");
        for (const auto& [path, content] : files) {
            fs::create_directories((staging / path).parent_path());
            writeFileAtomic(staging / path, content);
        }
        fs::remove(staging / kPartialMarker);
        if (fs::exists(out, ec)) {
            // One atomic exchange: the destination holds the old bundle or the new one at every instant.
            if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) != 0) {
                // A file system without the exchange: two renames, each bundle complete under its own name.
                const fs::path old = out.parent_path() / (stagingPrefix(out) + "old-" + std::to_string(::getpid()));
                std::ofstream(out / kPartialMarker) << "the bundle being replaced by an export\n";
                fs::rename(out, old, ec);
                if (!ec)
                    fs::rename(staging, out, ec);
                if (ec)
                    throw InputError("export: cannot replace " + out.string() + ": " + ec.message());
                fs::remove_all(old, ec);
                return;
            }
            fs::remove_all(staging, ec); // now the old bundle

        } else {
            fs::rename(staging, out, ec);
            if (ec)
                throw InputError("export: cannot create " + out.string() + ": " + ec.message());
        }
    }

    std::string shapeList(const std::vector<std::string>& labels, std::size_t max = 6)
    {
        std::string s;
        for (std::size_t i = 0; i < labels.size() && i < max; ++i)
            s += (i ? "; " : "") + labels[i];
        if (labels.size() > max)
            s += "; and " + std::to_string(labels.size() - max) + " more";
        return s;
    }

    bool approvedByReview(const Session& s, const std::string& id)
    {
        bool approved = false;
        for (const auto& r : s.reviews)
            if (r.candidateId == id)
                approved = r.approved; // the latest decision counts
        return approved;
    }

    std::string cudaArchOf(const DeviceInfo& d, std::vector<std::string>& warnings)
    {
        std::string arch = d.arch;
        if (arch.rfind("sm_", 0) == 0)
            arch = arch.substr(3);
        if (arch.empty() && d.ccMajor > 0)
            arch = std::to_string(d.ccMajor) + std::to_string(d.ccMinor) + (d.ccMajor == 9 ? "a" : "");
        for (char c : arch)
            if (!std::isalnum(static_cast<unsigned char>(c)))
                arch.clear();
        if (arch.empty()) {
            warnings.push_back("the session records no device architecture; the bundle builds for sm_90a");
            arch = "90a";
        }
        return arch;
    }

    std::vector<std::string> envSecrets()
    {
        std::vector<std::string> out;
        static const char* markers[] = { "KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH" };
        for (char** e = environ; e && *e; ++e) {
            const std::string kv = *e;
            const auto eq = kv.find('=');
            if (eq == std::string::npos)
                continue;
            const std::string name = detail::upperOf(kv.substr(0, eq));
            const std::string value = kv.substr(eq + 1);
            bool secret = false;
            for (const char* mk : markers)
                secret |= name.find(mk) != std::string::npos;
            // Paths (SSH_AUTH_SOCK) and short flags (TOKENIZERS_PARALLELISM=false) are not credentials.
            if (secret && value.size() >= 12 && value.front() != '/')
                out.push_back(value);
        }
        return out;
    }

    const std::vector<std::regex>& secretPatterns()
    {
        static const std::vector<std::regex> patterns = {
            std::regex(R"(sk-[A-Za-z0-9_\-]{16,})"),
            std::regex(R"(ghp_[A-Za-z0-9]{20,})"),
            std::regex(R"(AKIA[0-9A-Z]{16})"),
            std::regex(R"(-----BEGIN [A-Z ]*PRIVATE KEY-----)"),
            std::regex(R"([Bb]earer [A-Za-z0-9._\-]{16,})"),
            std::regex(R"((api[_-]?key|x-api-key)["']?\s*[:=]\s*["']?[A-Za-z0-9._\-]{12,})", std::regex::icase),
        };
        return patterns;
    }

    // Paths of the user's machine: absolute home/user directories, in Unix and Windows form.
    const std::regex& homePathPattern()
    {
        static const std::regex r(
            R"((/home/[^/\s"'<>]+|/Users/[^/\s"'<>]+|/root(?=[/\s"'])|[A-Za-z]:\\Users\\[^\\\s"'<>]+))");
        return r;
    }

    struct Scrubber {
        std::vector<std::string> secrets;
        std::vector<std::string> paths; // absolute paths, longest first

        std::string operator()(std::string s) const
        {
            for (const auto& v : secrets) {
                for (std::size_t pos; (pos = s.find(v)) != std::string::npos;)
                    s.replace(pos, v.size(), "<redacted>");
            }
            for (const auto& re : secretPatterns())
                s = std::regex_replace(s, re, "<redacted>");
            for (const auto& p : paths) {
                for (std::size_t pos; (pos = s.find(p)) != std::string::npos;)
                    s.replace(pos, p.size(), "<path>");
            }
            return std::regex_replace(s, homePathPattern(), "<home>");
        }
    };

    std::vector<std::string> privatePathsFor(const std::vector<fs::path>& extra)
    {
        std::set<std::string> paths;
        auto add = [&](const fs::path& p) {
            if (p.empty())
                return;
            std::error_code ec;
            fs::path abs = fs::absolute(p, ec);
            if (ec)
                return;
            std::string s = abs.lexically_normal().string();
            while (s.size() > 1 && s.back() == '/')
                s.pop_back();
            if (s.size() > 1)
                paths.insert(s);
        };
        if (const char* h = std::getenv("HOME"))
            add(h);
        std::error_code ec;
        add(fs::current_path(ec));
        for (const auto& p : extra)
            add(p);
        std::vector<std::string> out(paths.begin(), paths.end());
        std::sort(
            out.begin(), out.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
        return out;
    }

    Json timingJson(const TimingStats& t)
    {
        return Json { { "median_us", t.medianUs }, { "p10_us", t.p10Us }, { "p90_us", t.p90Us },
            { "ci95_low_us", t.ciLowUs }, { "ci95_high_us", t.ciHighUs }, { "samples", t.samples },
            { "graph_mode", t.graphMode }, { "launches_per_sample", t.launchesPerSample } };
    }

    Json regionJson(const DispatchRegion& r, const std::vector<std::string>& dims)
    {
        Json ranges = Json::object();
        for (std::size_t d = 0; d < dims.size() && d < r.ranges.size(); ++d)
            ranges[dims[d]] = Json::array({ r.ranges[d].lo, r.ranges[d].hi });
        return Json { { "ranges", ranges }, { "implementation", r.candidate ? "candidate" : "fallback" },
            { "wins", r.wins }, { "losses", r.losses }, { "min_speedup", r.minSpeedup },
            { "max_speedup", r.maxSpeedup } };
    }

    Json rangeJson(const std::vector<DimRange>& rs, const std::vector<std::string>& dims)
    {
        Json j = Json::object();
        for (std::size_t d = 0; d < dims.size() && d < rs.size(); ++d)
            j[dims[d]] = Json::array({ rs[d].lo, rs[d].hi });
        return j;
    }

    KernelImpl makeImpl(
        const std::string& role, const std::string& source, const ParamValues& params, const Scrubber& scrub)
    {
        KernelImpl k;
        k.role = role;
        try {
            k.spec = parseKernelSpec(source);
        } catch (const InputError& e) {
            throw InputError("the " + role + "'s annotations: " + e.what());
        }
        // A CUDA launcher encodes tensor maps and sets cluster/PDL attributes (bundle_gen.cpp); the Triton
        // launcher passes Triton's ABI only, so what only the harness does for it is refused rather than exported
        // as a bundle that would launch the kernel wrongly.
        if (k.triton())
            for (const auto& l : k.spec.launches)
                if (l.hasCluster || l.programmaticLaunch)
                    throw InputError("the " + role + "'s launch of " + l.kernel + " (line " + std::to_string(l.line)
                        + ") uses " + (l.hasCluster ? "cluster=" : "pdl=1")
                        + ": exported Triton bundles do not carry launch attributes yet");
        k.params = k.spec.defaults();
        for (const auto& [n, v] : params)
            k.params[n] = v;
        std::string body = scrub(source);
        if (!k.triton())
            k.devicePatched = detail::addDeviceQualifiers(body);
        k.source = bakeParameters(body, k.params);
        return k;
    }

    // A Triton candidate's CUBIN for the session's GPU, compiled again by the pinned Triton from the source and
    // parameters the session compiled and measured (the same job, so the same binary: Triton's compile is
    // deterministic for one version, source, signature and options).
    void compileTritonCubins(KernelImpl& k, const std::string& source, const Problem& problem, const std::string& arch)
    {
        CompileJob job;
        job.source = source;
        job.params = k.params;
        job.arch = arch;
        job.kernels = { k.spec.launches.front().kernel };
        prepareTritonJob(job, k.spec, problem);
        CompiledModule compiled;
        std::string why;
        k.tritonVersion = tritonVersion(&why);
        if (k.tritonVersion.empty())
            throw InputError("export: the candidate is Triton and its CUBIN is compiled at export: " + why);
        compileTriton(job, compiled);
        if (!compiled.report.ok)
            throw InputError("export: Triton could not compile the candidate for " + arch + ": " + compiled.report.log);
        const std::string& kernel = job.kernels.front();
        k.numWarps = job.numWarps;
        k.numStages = job.numStages;
        k.cubins.push_back({ arch, compiled.cubin, compiled.loweredNames.at(kernel), compiled.abi.at(kernel) });
    }

} // namespace

Json refusalsJson(const std::vector<ExportRefusal>& refusals)
{
    Json j = Json::array();
    for (const auto& r : refusals)
        j.push_back({ { "code", r.code }, { "message", r.message } });
    return j;
}

std::string refusalLines(const std::vector<ExportRefusal>& refusals)
{
    std::string s;
    for (const auto& r : refusals)
        s += "  - " + r.code + ": " + r.message + "\n";
    return s;
}

void refuseUnlessForced(
    const std::string& what, const std::vector<ExportRefusal>& refusals, bool force, const std::string& forceWritesInto)
{
    if (refusals.empty() || force)
        return;
    std::string msg = "refusing to export " + what + ":\n" + refusalLines(refusals);
    msg += "(--force exports anyway and writes these reasons into " + forceWritesInto + ")";
    throw ExportRefused(msg, refusals);
}

std::string bundleCudaArch(const DeviceInfo& device, std::vector<std::string>& warnings)
{
    return cudaArchOf(device, warnings);
}

std::string bundlePrefix(const Problem& problem)
{
    return detail::lowerOf("kl_" + detail::cIdent(problem.name));
}

std::string defaultCandidate(const Session& s, bool anyStatus)
{
    std::string best;
    double bestObjective = 0;
    for (const bool accepted : { true, false }) {
        if (!accepted && (!anyStatus || !best.empty()))
            break;
        for (const auto& id : s.tree.order()) {
            const Candidate& c = s.tree.at(id);
            const auto ev = s.evaluations.find(id);
            if ((accepted && c.status != CandidateStatus::Accepted) || ev == s.evaluations.end()
                || ev->second.fidelity.screen())
                continue;
            if (best.empty() || ev->second.objective > bestObjective) {
                best = id;
                bestObjective = ev->second.objective;
            }
        }
    }
    if (best.empty())
        throw InputError(
            "session " + s.id + " has no accepted candidate with an evaluation; name one with --candidate");
    return best;
}

namespace {

    void setFallback(ExportPlan& plan, const Problem& problem)
    {
        plan.usesLibraryFallback = isCublasGemm(problem.libraryBaseline);
        plan.fallbackDescription = plan.usesLibraryFallback
            ? "cuBLAS (" + problem.libraryBaseline + ")"
            : "the problem's reference kernel (" + problem.referenceFile + ")";
    }

} // namespace

void refuseScreened(const Session& s, const std::string& candidateId)
{
    if (const auto ev = s.evaluations.find(candidateId); ev != s.evaluations.end() && ev->second.fidelity.screen())
        throw InputError("export: candidate " + candidateId + " was only screened (" + ev->second.fidelity.label()
            + ", multi-fidelity search): a screen ranks configurations and is no measurement to ship, not even with "
              "--force; export the full-protocol evaluation of its configuration");
}

ExportPlan planExport(
    const Session& s, const Problem& problem, const std::string& candidateId, double minSpeedup, const Regime* regime)
{
    ExportPlan plan;
    plan.candidateId = candidateId;
    plan.regime = regime ? regime->name : std::string();
    if (!s.tree.contains(candidateId))
        throw InputError("session " + s.id + " has no candidate '" + candidateId + "'");
    const Candidate& c = s.tree.at(candidateId);
    auto refuse = [&](const std::string& code, const std::string& msg) { plan.refusals.push_back({ code, msg }); };
    const bool approved = approvedByReview(s, candidateId);
    switch (c.status) {
    case CandidateStatus::Accepted:
        break;
    case CandidateStatus::Approved:
        // A flagged candidate a human approved: exportable once it has been measured.
        if (!approved)
            refuse("not-accepted", "candidate " + candidateId + " is approved but has no approving review on record");
        break;
    case CandidateStatus::PendingReview:
        refuse("pending-review",
            "candidate " + candidateId + " is pending human review"
                + (c.statusReason.empty() ? "" : " (" + c.statusReason + ")"));
        break;
    default:
        refuse("not-accepted",
            "candidate " + candidateId + " is " + statusName(c.status)
                + (c.statusReason.empty() ? "" : ": " + c.statusReason) + "; only accepted candidates export");
    }
    const auto evIt = s.evaluations.find(candidateId);
    if (evIt == s.evaluations.end()) {
        refuse("not-evaluated", "candidate " + candidateId + " has no recorded evaluation");
        plan.dispatch = buildDispatchPlan(problem, {}, minSpeedup);
    } else {
        const Evaluation& ev = evIt->second;
        if (ev.verdict != Verdict::Accepted && !(ev.verdict == Verdict::PendingReview && approved))
            refuse("verdict", std::string("the harness's verdict is ") + verdictName(ev.verdict) + ", not accepted");
        for (const auto& r : ev.reasons) {
            if (!r.blocking && !isReviewFlag(r))
                continue; // the loop's record of its decision
            const std::string at = r.line > 0 ? " (line " + std::to_string(r.line) + ")" : "";
            if (r.blocking)
                refuse("referee-rejected", "referee rule " + r.rule + at + ": " + r.message);
            else if (!approved)
                refuse("flagged",
                    "flagged by referee rule " + r.rule + at + ": " + r.message + " (no human approval recorded)");
            else
                plan.warnings.push_back("flag " + r.rule + " was approved by a human reviewer: " + r.message);
        }
        std::vector<std::string> wrong;
        bool heldOut = false;
        for (const auto& r : ev.shapes) {
            if (!r.correct)
                wrong.push_back(r.shape.label());
            heldOut |= r.heldOut && r.correct;
        }
        if (!wrong.empty())
            refuse("incorrect-shape",
                "incorrect on " + std::to_string(wrong.size()) + " verified shape(s): " + shapeList(wrong));
        if (ev.shapes.empty())
            refuse("not-verified", "the evaluation has no per-shape results");
        else if (!heldOut)
            refuse("no-held-out", "not verified on any held-out shape (drawn at random from the validity range)");
        plan.dispatch = buildDispatchPlan(problem, ev.shapes, minSpeedup);
        // The claim is the problem's validity range: its extremes must have been verified.
        const auto& vr = plan.dispatch.verifiedRange;
        for (std::size_t d = 0; d < problem.dims.size(); ++d) {
            const DimSpec& ds = problem.dims[d];
            const std::int64_t m = std::max<std::int64_t>(1, ds.multipleOf);
            const std::int64_t lo = (ds.min + m - 1) / m * m;
            const std::int64_t hi = ds.max / m * m;
            if (vr.empty() || vr[d].lo > lo || vr[d].hi < hi) {
                const std::string got = vr.empty()
                    ? std::string("nothing")
                    : "[" + std::to_string(vr[d].lo) + ", " + std::to_string(vr[d].hi) + "]";
                refuse("range-not-covered",
                    "dim " + ds.name + " is claimed on [" + std::to_string(lo) + ", " + std::to_string(hi)
                        + "] but verified only on " + got);
            }
        }
        if (regime) {
            std::vector<ShapeResult> inside;
            for (const ShapeResult& r : ev.shapes)
                if (regime->contains(r.shape))
                    inside.push_back(r);
            plan.dispatch = buildDispatchPlan(problem, inside, minSpeedup);
        }
        for (const auto* sample : { &ev.deviceBefore, &ev.deviceAfter })
            if (sample->available && sample->throttled())
                plan.warnings.push_back("measured while the GPU was throttled: " + sample->throttleText);
    }
    if (plan.dispatch.candidateRegions.empty())
        plan.warnings.push_back("no shape was measured surely faster: the dispatcher always uses the fallback");
    plan.minSpeedup = minSpeedup;
    setFallback(plan, problem);
    return plan;
}

ExportPlan planFallbackExport(const Problem& problem, const std::string& prefix)
{
    ExportPlan plan;
    plan.dispatch = buildDispatchPlan(problem, {}, 1.0);
    plan.prefix = prefix;
    setFallback(plan, problem);
    return plan;
}

std::vector<std::string> findLeaks(
    const std::string& content, const std::vector<std::string>& secrets, const std::vector<std::string>& privatePaths)
{
    std::vector<std::string> leaks;
    for (const auto& s : secrets)
        if (!s.empty() && content.find(s) != std::string::npos)
            leaks.push_back("a secret value (" + std::to_string(s.size()) + " characters)");
    for (const auto& re : secretPatterns()) {
        std::smatch m;
        if (std::regex_search(content, m, re))
            leaks.push_back("something shaped like a credential ('" + m.str().substr(0, 6) + "...')");
    }
    for (const auto& p : privatePaths)
        if (!p.empty() && content.find(p) != std::string::npos)
            leaks.push_back("the local path " + p);
    std::smatch m;
    if (std::regex_search(content, m, homePathPattern()))
        leaks.push_back("a home directory path '" + m.str() + "'");
    return leaks;
}

namespace {

    Scrubber makeScrubber(const std::vector<std::string>& extraSecrets, const std::vector<fs::path>& paths)
    {
        Scrubber s;
        s.secrets = envSecrets();
        for (const auto& x : extraSecrets)
            if (!x.empty())
                s.secrets.push_back(x);
        s.paths = privatePathsFor(paths);
        return s;
    }

    // The parts of the model every bundle has: names, architecture, problem and fallback (no candidate yet).
    BundleModel fallbackModel(const Session& s, const Problem& problem, const ExportPlan& plan, bool forced,
        const Scrubber& scrub, std::vector<std::string>& warnings)
    {
        BundleModel m;
        m.prefix = plan.prefix.empty() ? bundlePrefix(problem) : plan.prefix;
        m.upper = detail::upperOf(m.prefix);
        m.cudaArch = cudaArchOf(s.device, warnings);
        m.session = &s;
        m.problem = &problem;
        m.plan = &plan;
        m.forced = forced;
        m.libraryFallback = plan.usesLibraryFallback;
        if (!m.libraryFallback) {
            if (problem.folder.empty())
                throw InputError("problem '" + problem.name + "' has no folder: the reference kernel cannot be read");
            const fs::path ref = fs::path(problem.folder) / problem.referenceFile;
            std::string refSource;
            try {
                refSource = readFile(ref);
            } catch (const std::exception& e) {
                throw InputError("reference kernel " + problem.referenceFile + " of problem '" + problem.name
                    + "' is not readable: " + e.what());
            }
            m.fallback = makeImpl("fallback", refSource, {}, scrub);
        }
        return m;
    }

    // The files of every bundle, with or without a candidate: C API, dispatcher, fallback, entry point, build.
    void addDispatcherAndFallback(const BundleModel& m, std::map<std::string, std::string>& files)
    {
        const std::string& P = m.prefix;
        files["include/" + P + ".h"] = detail::genApiHeader(m);
        files["include/" + P + "_dispatch.h"] = detail::genDispatchHeader(m);
        files["src/kl_expr.h"] = "#ifndef KL_EXPR_H\n#define KL_EXPR_H\n" + expressionRuntimeC() + "#endif\n";
        files["src/" + P + "_dispatch.c"] = detail::genDispatchC(m);
        if (m.libraryFallback) {
            files["src/" + P + "_fallback.cu"] = detail::genCublasLauncher(m);
        } else {
            files["src/" + P + "_fallback.cuh"] = detail::genKernelHeader(m, m.fallback,
                "The fallback: problem " + m.problem->name + "'s trusted reference kernel (" + m.problem->referenceFile
                    + ").");
            files["src/" + P + "_fallback.cu"] = detail::genKernelLauncher(m, m.fallback);
        }
        files["src/" + P + "_run.cu"] = detail::genRunCu(m);
        files["CMakeLists.txt"] = detail::genCMake(m);
    }

    std::map<std::string, std::string> generateWith(
        const Session& s, const Problem& problem, const ExportPlan& plan, bool forced, const Scrubber& scrub)
    {
        const Candidate& cand = s.tree.at(plan.candidateId);
        const auto evIt = s.evaluations.find(plan.candidateId);
        const Evaluation* ev = evIt == s.evaluations.end() ? nullptr : &evIt->second;
        std::vector<std::string> warnings = plan.warnings;

        BundleModel m = fallbackModel(s, problem, plan, forced, scrub, warnings);
        m.candidate = &cand;
        m.evaluation = ev;
        m.cand = makeImpl("candidate", cand.source, cand.params, scrub);
        if (m.cand.triton())
            compileTritonCubins(m.cand, cand.source, problem, "sm_" + m.cudaArch);

        // Provenance banner, shared by every generated header.
        std::vector<std::string> lineage = s.tree.lineage(cand.id);
        std::string lin;
        for (const auto& id : lineage)
            lin += (lin.empty() ? "" : " > ") + id;
        std::string b;
        auto line = [&](const std::string& t) { b += " * " + detail::commentSafe(scrub(t)) + "\n"; };
        if (forced) {
            line("!!! FORCED EXPORT: KernelLoop refused this candidate and it was exported with --force. !!!");
            for (const auto& r : plan.refusals)
                line("!!! " + r.code + ": " + r.message);
        }
        line("Computes: " + problem.name + (problem.description.empty() ? "" : " -- " + problem.description));
        line("Device: " + (s.device.name.empty() ? std::string("unknown") : s.device.name) + " (sm_" + m.cudaArch
            + "), driver " + (s.device.driverVersion.empty() ? "unknown" : s.device.driverVersion) + ", CUDA runtime "
            + (s.device.cudaRuntime.empty() ? "unknown" : s.device.cudaRuntime));
        line("Provenance: KernelLoop session " + s.id + ", candidate " + cand.id + " (lineage " + lin + "), author "
            + authorName(cand.author) + (cand.agent.empty() ? "" : " / " + cand.agent));
        if (!cand.hypothesisId.empty()) {
            const auto h = s.hypotheses.find(cand.hypothesisId);
            if (h != s.hypotheses.end())
                line("Hypothesis " + h->first + ": " + h->second.text);
        }
        if (ev)
            line(std::string("Referee verdict: ") + verdictName(ev->verdict) + "; objective "
                + std::to_string(ev->objective) + " [" + std::to_string(ev->objectiveCiLow) + ", "
                + std::to_string(ev->objectiveCiHigh) + "]");
        if (!plan.dispatch.verifiedRange.empty()) {
            std::size_t held = 0;
            for (const auto& p : plan.dispatch.points)
                held += p.heldOut ? 1 : 0;
            line("Verified on " + std::to_string(plan.dispatch.points.size()) + " shapes (" + std::to_string(held)
                + " held out) spanning "
                + DispatchRegion { plan.dispatch.verifiedRange, false, 0, 0, 0, 0 }.label(plan.dispatch.dims));
        }
        {
            std::string claim;
            for (const auto& d : problem.dims)
                claim += (claim.empty() ? "" : ", ") + d.name + " in [" + std::to_string(d.min) + ", "
                    + std::to_string(d.max) + "]"
                    + (d.multipleOf > 1 ? " (multiple of " + std::to_string(d.multipleOf) + ")" : "");
            for (const auto& c : problem.dimConstraints)
                claim += ", " + c.text();
            line("Claimed validity range (the problem's): " + claim);
        }
        for (const auto& c : m.cand.cubins)
            line("Triton " + m.cand.tritonVersion + " CUBIN for " + c.arch + " (sha256 " + sha256Hex(c.cubin)
                + "), num_warps " + std::to_string(m.cand.numWarps) + ", num_stages " + std::to_string(m.cand.numStages)
                + ", " + std::to_string(c.abi.dynamicSharedBytes) + " bytes of shared memory");
        line("Source sha256: " + sha256Hex(cand.source));
        m.banner = b;

        const std::string& P = m.prefix;
        std::map<std::string, std::string> files;
        addDispatcherAndFallback(m, files);
        if (m.cand.triton()) {
            files["src/" + P + "_candidate_cubin.h"] = detail::genCubinTable(m, m.cand);
            for (const auto& c : m.cand.cubins)
                files["cubin/" + detail::cubinFileName(m, c)] = c.cubin;
            files["torch/" + P + "_triton.py"] = detail::genTritonModule(m, m.cand);
        } else {
            files["src/" + P + "_candidate.cuh"] = detail::genKernelHeader(
                m, m.cand, "The exported candidate kernel " + cand.id + " of " + problem.name + ".");
        }
        files["src/" + P + "_candidate.cu"] = detail::genKernelLauncher(m, m.cand);
        files["test/selftest.cu"] = detail::genSelfTest(m);
        files["test/dispatch_test.c"] = detail::genDispatchTest(m);
        files["torch/" + P + "_op.cpp"] = detail::genTorchOp(m);
        files["torch/" + P + ".py"] = detail::genTorchLoader(m);
        files["README.md"] = detail::genReadme(m);

        // manifest.json
        Json man;
        man["format"] = "kernelloop-export/1";
        man["session_id"] = s.id;
        man["exported"] = { { "forced", forced }, { "refusals", Json::array() }, { "warnings", Json::array() },
            { "min_speedup_ci_low", plan.minSpeedup } };
        for (const auto& r : plan.refusals)
            man["exported"]["refusals"].push_back({ { "code", r.code }, { "message", scrub(r.message) } });
        for (const auto& w : warnings)
            man["exported"]["warnings"].push_back(scrub(w));
        if (forced)
            man["FORCED_EXPORT"] = "KernelLoop refused this candidate; exported with --force despite: " + [&] {
                std::string t;
                for (const auto& r : plan.refusals)
                    t += (t.empty() ? "" : "; ") + r.code;
                return t;
            }();
        Json pj = toJson(problem);
        pj.erase("folder");
        man["problem"] = pj;
        Json dev = toJson(s.device);
        dev.erase("uuid"); // identifies one physical GPU of the user's; not needed to rebuild or judge the kernel
        man["device"] = dev;
        auto candJson = [&](const Candidate& c) {
            Json j { { "id", c.id }, { "parent", c.parentId }, { "author", authorName(c.author) }, { "agent", c.agent },
                { "hypothesis", c.hypothesisId }, { "status", statusName(c.status) },
                { "status_reason", scrub(c.statusReason) }, { "params", c.params },
                { "source_sha256", sha256Hex(c.source) }, { "created_ms", c.createdMs } };
            const auto e = s.evaluations.find(c.id);
            if (e != s.evaluations.end())
                j["objective"] = { { "value", e->second.objective },
                    { "ci95", { e->second.objectiveCiLow, e->second.objectiveCiHigh } } };
            return j;
        };
        man["candidate"] = candJson(cand);
        man["candidate"]["baked_params"] = m.cand.params;
        man["candidate"]["language"] = languageName(m.cand.spec.language);
        if (m.cand.triton()) {
            Json cubins = Json::object();
            for (const auto& c : m.cand.cubins)
                cubins[c.arch] = { { "file", "cubin/" + detail::cubinFileName(m, c) }, { "sha256", sha256Hex(c.cubin) },
                    { "symbol", c.symbol }, { "shared_bytes", c.abi.dynamicSharedBytes },
                    { "trailing_null_pointers", c.abi.trailingNullPointers } };
            man["triton"] = { { "version", m.cand.tritonVersion }, { "kernel", m.cand.spec.launches.front().kernel },
                { "num_warps", m.cand.numWarps }, { "num_stages", m.cand.numStages },
                { "threads_per_block", 32 * m.cand.numWarps }, { "cubins", cubins },
                { "source", "torch/" + P + "_triton.py" },
                { "launcher", "src/" + P + "_candidate.cu (CUDA driver API: cuModuleLoadData, cuLaunchKernelEx)" } };
        }
        man["lineage"] = Json::array();
        std::set<std::string> hyps;
        for (const auto& id : lineage) {
            man["lineage"].push_back(candJson(s.tree.at(id)));
            if (!s.tree.at(id).hypothesisId.empty())
                hyps.insert(s.tree.at(id).hypothesisId);
        }
        man["hypotheses"] = Json::array();
        for (const auto& h : hyps) {
            const auto it = s.hypotheses.find(h);
            if (it != s.hypotheses.end())
                man["hypotheses"].push_back({ { "id", h }, { "text", scrub(it->second.text) },
                    { "author", authorName(it->second.author) }, { "created_ms", it->second.createdMs } });
        }
        Json shapes = Json::array();
        for (std::size_t i = 0; ev && i < ev->shapes.size(); ++i) {
            const ShapeResult& r = ev->shapes[i];
            Json sj { { "shape", r.shape.dims }, { "label", r.shape.label() }, { "held_out", r.heldOut },
                { "correct", r.correct } };
            sj["checks"] = Json::array();
            for (const auto& c : r.checks)
                sj["checks"].push_back({ { "distribution", c.distribution }, { "rel_l2", c.relL2 },
                    { "max_abs", c.maxAbs }, { "non_finite", c.nonFinite }, { "full_coverage", c.fullCoverage },
                    { "canaries_intact", c.canariesIntact }, { "inputs_unchanged", c.inputsUnchanged },
                    { "passed", c.passed } });
            if (r.timing)
                sj["timing"] = timingJson(*r.timing);
            if (r.baselineTiming)
                sj["baseline_timing"] = timingJson(*r.baselineTiming);
            if (r.graphTiming)
                sj["graph_timing"] = timingJson(*r.graphTiming);
            sj["speedup"] = { { "median", r.speedup }, { "ci95", { r.speedupCiLow, r.speedupCiHigh } } };
            if (i < plan.dispatch.points.size()) {
                sj["dispatch_class"] = pointClassName(plan.dispatch.points[i].cls);
                sj["dispatch_why"] = plan.dispatch.points[i].why;
            }
            shapes.push_back(sj);
        }
        man["evaluation"]
            = { { "verdict", ev ? verdictName(ev->verdict) : "none" }, { "objective", ev ? ev->objective : 0.0 },
                  { "objective_ci95", { ev ? ev->objectiveCiLow : 0.0, ev ? ev->objectiveCiHigh : 0.0 } },
                  { "objective_kind", s.settings.objective }, { "speedups_measured_against", problem.baselineFile },
                  { "started_ms", ev ? ev->startedMs : 0 }, { "finished_ms", ev ? ev->finishedMs : 0 },
                  { "device_before", ev ? toJson(ev->deviceBefore) : Json() },
                  { "device_after", ev ? toJson(ev->deviceAfter) : Json() }, { "shapes", shapes } };
        Json reasons = Json::array();
        for (const auto& r : (ev ? ev->reasons : std::vector<VerdictReason> {}))
            reasons.push_back({ { "rule", r.rule }, { "message", scrub(r.message) }, { "line", r.line },
                { "blocking", r.blocking } });
        Json reviews = Json::array();
        for (const auto& r : s.reviews)
            if (r.candidateId == cand.id)
                reviews.push_back(
                    { { "approved", r.approved }, { "reason", scrub(r.reason) }, { "decided_ms", r.decidedMs } });
        man["referee"]
            = { { "verdict", ev ? verdictName(ev->verdict) : "none" }, { "reasons", reasons }, { "reviews", reviews } };
        Json disp;
        disp["dims"] = plan.dispatch.dims;
        disp["validity_range"] = rangeJson(plan.dispatch.validityRange, plan.dispatch.dims);
        disp["verified_range"] = rangeJson(plan.dispatch.verifiedRange, plan.dispatch.dims);
        disp["candidate_regions"] = Json::array();
        for (const auto& r : plan.dispatch.candidateRegions)
            disp["candidate_regions"].push_back(regionJson(r, plan.dispatch.dims));
        disp["loss_regions"] = Json::array();
        for (const auto& r : plan.dispatch.lossRegions)
            disp["loss_regions"].push_back(regionJson(r, plan.dispatch.dims));
        disp["fallback"] = { { "kind", m.libraryFallback ? "library" : "reference-kernel" },
            { "name", m.libraryFallback ? problem.libraryBaseline : problem.referenceFile },
            { "description", plan.fallbackDescription } };
        disp["rule"]
            = "candidate only inside a region (bounding box of shapes measured faster, lower 95% CI of the speedup "
              "above 1, with no slower or incorrect shape inside), where its constraints hold and the shape is in the "
              "problem's validity range; the fallback everywhere else";
        man["dispatch"] = disp;
        Json hashes = Json::object();
        for (const auto& [path, content] : files)
            hashes[path] = sha256Hex(content);
        man["files"] = hashes;
        files["manifest.json"] = man.dump(2) + "\n";
        return files;
    }

} // namespace

std::map<std::string, std::string> generateBundle(
    const Session& s, const Problem& problem, const ExportPlan& plan, bool forced)
{
    return generateWith(s, problem, plan, forced, makeScrubber({}, { fs::path(problem.folder) }));
}

namespace {

    fs::path checkedOutDir(const ExportOptions& options)
    {
        if (options.outDir.empty())
            throw InputError("export: no output directory (--out DIR)");
        std::error_code ec;
        const fs::path out = fs::absolute(options.outDir, ec);
        if (fs::exists(out, ec)) {
            if (!fs::is_directory(out, ec))
                throw InputError("export: " + options.outDir.string() + " exists and is not a directory");
            if (!fs::is_empty(out, ec) && !options.overwrite)
                throw InputError(
                    "export: " + options.outDir.string() + " exists and is not empty; pass --overwrite to replace it");
        }
        return out;
    }

    Scrubber scrubberFor(const Problem& problem, const ExportOptions& options)
    {
        std::error_code ec;
        return makeScrubber(options.secrets, { fs::path(problem.folder), fs::absolute(options.outDir, ec) });
    }

} // namespace

std::map<std::string, std::string> generateBundleFor(
    const Session& s, const Problem& problem, const ExportPlan& plan, bool forced, const ExportOptions& options)
{
    return generateWith(s, problem, plan, forced, scrubberFor(problem, options));
}

std::map<std::string, std::string> generateFallbackBundleFor(
    const Problem& problem, const ExportPlan& plan, const DeviceInfo& device, const ExportOptions& options)
{
    Session deviceOnly; // the architecture to build for; no candidate, so nothing else of a session is read
    deviceOnly.device = device;
    std::vector<std::string> warnings;
    const Scrubber scrub = scrubberFor(problem, options);
    BundleModel m = fallbackModel(deviceOnly, problem, plan, false, scrub, warnings);
    m.banner = " * "
        + detail::commentSafe(
            scrub("Computes: " + problem.name + (problem.description.empty() ? "" : " -- " + problem.description)))
        + "\n * " + detail::commentSafe("No candidate: every shape runs the fallback, " + plan.fallbackDescription)
        + "\n";
    std::map<std::string, std::string> files;
    addDispatcherAndFallback(m, files);
    return files;
}

std::filesystem::path writeExport(
    const std::map<std::string, std::string>& files, const Problem& problem, const ExportOptions& options)
{
    const fs::path out = checkedOutDir(options);
    const Scrubber scrub = scrubberFor(problem, options);
    // Defense in depth: whatever the scrubbing missed stops the export before anything is written.
    for (const auto& [path, content] : files) {
        const auto leaks = findLeaks(content, scrub.secrets, scrub.paths);
        if (!leaks.empty())
            throw InputError("export: " + path + " would contain " + leaks.front() + "; nothing was written");
    }
    std::error_code ec;
    if (fs::exists(out, ec) && !fs::is_empty(out, ec) && !isExportedBundle(out))
        throw InputError("export: " + options.outDir.string()
            + " is not an exported bundle (no manifest.json); refusing to overwrite it");
    writeBundleBeside(out, files);
    return out;
}

ExportResult exportBundle(const Session& s, const Problem& problem, const ExportOptions& options)
{
    if (options.outDir.empty())
        throw InputError("export: no output directory (--out DIR)");
    ExportResult result;
    const std::string id = options.candidateId.empty() ? defaultCandidate(s, options.force) : options.candidateId;
    refuseScreened(s, id);
    result.plan = planExport(s, problem, id, options.minSpeedup);
    refuseUnlessForced("candidate " + id, result.plan.refusals, options.force, "manifest.json and the headers");
    result.forced = !result.plan.refusals.empty();
    checkedOutDir(options); // before generating: a wrong --out fails at once
    const auto files = generateBundleFor(s, problem, result.plan, result.forced, options);
    result.outDir = writeExport(files, problem, options);
    for (const auto& [path, content] : files) {
        result.files.push_back(path);
        if (path != "manifest.json")
            result.fileSha256[path] = sha256Hex(content);
    }
    return result;
}

} // namespace kl::exporter
