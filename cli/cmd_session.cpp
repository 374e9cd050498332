// kloop session new|show|list|diff|review, and kloop version.
#include "cli/command.h"
#include "core/catalogue.h"
#include "core/current_best.h"
#include "core/diff.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_inbox.h"
#include "core/session_store.h"
#include "kl_build_features.h"
#include "profiler/importers.h"
#include "profiler/workload_session.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>

namespace fs = std::filesystem;

namespace kl::cli {
namespace {

    std::string sessionIdFromDir(const fs::path& dir)
    {
        std::string name = fs::absolute(dir).lexically_normal().filename().string();
        std::string id;
        for (char c : name)
            id += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '-';
        if (id.empty())
            id = "session";
        return id.substr(0, 64);
    }

    std::string medianText(const Session& s, const CandidateId& id)
    {
        const auto it = s.evaluations.find(id);
        if (it == s.evaluations.end() || it->second.shapes.empty())
            return "-";
        // Geometric-mean speedup is the objective; show it when the harness measured a baseline.
        char buf[64];
        if (it->second.objective > 0) {
            std::snprintf(buf, sizeof buf, "%.3fx", it->second.objective);
            return buf;
        }
        return "-";
    }

    int runNewFromTrace(const Args& a, const fs::path& dir, const fs::path& folder, const std::string& tracePath)
    {
        prof::TraceSessionRequest request;
        request.dir = dir;
        request.problemFolder = folder;
        request.tracePath = fs::absolute(tracePath).string();
        request.id = a.optionOr("id", sessionIdFromDir(dir));
        request.agent = a.optionOr("agent", "");
        request.maxShapes = static_cast<size_t>(a.integer("max-shapes", 8, 1, 64));
        const prof::Trace trace = prof::importTraceFile(tracePath);
        const prof::Workload workload = prof::analyzeWorkload(trace, { loadProblem(folder.string()) });
        const prof::TraceSession s = prof::createSessionFromWorkload(workload, request);
        const prof::TunableOp* op = workload.tunableFor(s.problem.name);
        if (a.has("json")) {
            Json shapes = Json::array();
            for (const auto& sh : s.problem.tuningShapes)
                shapes.push_back(toJson(sh));
            Json seeded = Json::array();
            for (const auto& [id, role] : s.seeded)
                seeded.push_back(id + " (" + role + ")");
            std::cout << Json {
                { "session", fs::absolute(dir).string() }, { "id", s.id }, { "problem", s.problem.name },
                { "trace", request.tracePath }, { "tuning_shapes", shapes }, { "share", op ? op->share : 0.0 },
                { "candidates", seeded }
            }.dump(2) << "\n";
            return kExitOk;
        }
        std::printf(
            "created session '%s' for problem %s in %s\n", s.id.c_str(), s.problem.name.c_str(), dir.string().c_str());
        std::printf("  from %s: %s is %.1f%% of its GPU time; tuning shapes (weight = share of that time):\n",
            tracePath.c_str(), s.problem.name.c_str(), op ? op->share * 100 : 0.0);
        for (const auto& sh : s.problem.tuningShapes)
            std::printf("    %-40s weight %.3f\n", sh.label().c_str(), sh.weight);
        std::printf("next: kloop run --resume %s --agent tuner:bayes   (kloop trace analyze %s --session %s projects "
                    "the gain)\n",
            dir.string().c_str(), tracePath.c_str(), dir.string().c_str());
        return kExitOk;
    }

    int runNew(const Args& a)
    {
        if (a.positionals().size() != 1 || !a.option("problem")) {
            std::cerr << "usage: kloop session new DIR --problem NAME [--from-trace TRACE [--max-shapes N]] [--id ID] "
                         "[--json]\n";
            return kExitUsage;
        }
        const fs::path dir = a.positionals()[0];
        const fs::path folder = findProblemFolder(*a.option("problem"));
        if (auto trace = a.option("from-trace"))
            return runNewFromTrace(a, dir, folder, *trace);
        const Problem problem = loadProblem(folder.string());
        Session header;
        header.id = a.optionOr("id", sessionIdFromDir(dir));
        header.problemName = problem.name;
        header.problemFolder = folder.string();
        header.settings.agent = a.optionOr("agent", "");
        header.settings.regimes = a.optionOr("regimes", "problem");
        if (!SessionSettings::isKnownRegimes(header.settings.regimes))
            throw UsageError("--regimes is problem (a best per regime of problem.json) or single, got '"
                + header.settings.regimes + "'");
        auto store = SessionStore::create(dir, header);
        // Seed the tree: the naive baseline is the root; the tunable template with its defaults branches from it.
        std::vector<std::string> seeded;
        for (const auto& [id, role] : seedProblemCandidates(*store, problem, folder))
            seeded.push_back(id + " (" + role + ")");
        if (a.has("json")) {
            Json j = { { "session", fs::absolute(dir).string() }, { "id", header.id }, { "problem", problem.name },
                { "candidates", seeded } };
            std::cout << j.dump(2) << "\n";
        } else {
            std::cout << "created session '" << header.id << "' for problem " << problem.name << " in " << dir.string()
                      << "\n";
            for (const auto& s : seeded)
                std::cout << "  " << s << "\n";
            std::cout << "next: kloop run --resume " << dir.string()
                      << (header.settings.agent.empty() ? " --agent tuner:bayes (or llm:<provider>)" : "")
                      << "   (kloop session show " << dir.string() << " lists the candidates)\n";
        }
        return kExitOk;
    }

    void printTree(const Session& s, const CandidateId& id, int depth)
    {
        const Candidate& c = s.tree.at(id);
        std::string params;
        for (const auto& [k, v] : c.params)
            params += (params.empty() ? "" : " ") + k + "=" + std::to_string(v);
        std::printf("%*s%s%s  %-14s %-8s %-10s %s%s\n", depth * 2, "", c.id.c_str(), id == s.tree.head() ? "*" : " ",
            displayState(c).c_str(), authorName(c.author), medianText(s, id).c_str(), params.c_str(),
            displayReason(c).empty() ? "" : ("  -- " + displayReason(c)).c_str());
        for (const auto& child : s.tree.children(id))
            printTree(s, child, depth + 1);
    }

    // A pool's GPUs of different models are separate leaderboards: accepted candidates by objective, per model
    // (Evaluation::measuredOn; evaluations recorded without it count for the session's device).
    Json leaderboards(const Session& s)
    {
        Json boards = Json::object();
        for (const auto& id : s.tree.order()) {
            const auto it = s.evaluations.find(id);
            if (it == s.evaluations.end() || it->second.measuredOn.empty())
                continue;
            const Evaluation& e = it->second;
            Json& board = boards[gpuModelOf(s, e)];
            if (board.is_null())
                board = { { "evaluations", 0 }, { "workers", Json::array() }, { "accepted", Json::array() } };
            board["evaluations"] = board["evaluations"].get<int>() + 1;
            if (std::find(board["workers"].begin(), board["workers"].end(), e.measuredOn.worker)
                == board["workers"].end())
                board["workers"].push_back(e.measuredOn.worker);
            if (s.tree.at(id).status == CandidateStatus::Accepted && e.objective > 0)
                board["accepted"].push_back(
                    { { "candidate", id }, { "objective", e.objective }, { "worker", e.measuredOn.worker } });
        }
        for (auto& [gpu, board] : boards.items()) {
            auto& acc = board["accepted"];
            std::sort(acc.begin(), acc.end(), [](const Json& x, const Json& y) {
                return x["objective"].get<double>() > y["objective"].get<double>();
            });
        }
        return boards;
    }

    Json regimesJson(const Session& s)
    {
        Json out = Json::array();
        for (const RegimeWinner& w : regimeWinners(s))
            out.push_back({ { "regime", w.regime }, { "condition", w.condition },
                { "winner", w.winner ? Json(*w.winner) : Json() }, { "speedup", w.result.objective },
                { "ci_low", w.result.objectiveCiLow }, { "ci_high", w.result.objectiveCiHigh },
                { "timed_shapes", w.result.timedShapes }, { "verified_shapes", w.result.verifiedShapes } });
        return out;
    }

    void printRegimes(const Session& s)
    {
        const auto winners = regimeWinners(s);
        if (winners.empty())
            return;
        // Columns as wide as the longest name and condition (learned regimes have long ones).
        int nameWidth = 12, conditionWidth = 24;
        for (const RegimeWinner& w : winners) {
            nameWidth = std::max(nameWidth, static_cast<int>(w.regime.size()));
            conditionWidth = std::max(conditionWidth, static_cast<int>(w.condition.size()));
        }
        auto row = [&](const std::string& regime, const std::string& condition, const std::string& winner,
                       const std::string& speedup, const std::string& ci, const std::string& verified) {
            char buf[512];
            std::snprintf(buf, sizeof buf, "  %-*s %-*s %-8s %-9s %-18s %s\n", nameWidth, regime.c_str(),
                conditionWidth, condition.c_str(), winner.c_str(), speedup.c_str(), ci.c_str(), verified.c_str());
            std::cout << buf;
        };
        std::cout << "regimes (a best per regime; speedup over the baseline on the regime's tuning shapes):\n";
        row("regime", "condition", "winner", "speedup", "95% CI", "verified shapes");
        for (const RegimeWinner& w : winners) {
            if (!w.winner) {
                row(w.regime, w.condition, "-", "-", "-", "- (the fallback)");
                continue;
            }
            char speedup[32], ci[64];
            std::snprintf(speedup, sizeof speedup, "%.3fx", w.result.objective);
            std::snprintf(ci, sizeof ci, "[%.3f, %.3f]", w.result.objectiveCiLow, w.result.objectiveCiHigh);
            row(w.regime, w.condition, *w.winner, speedup, ci, std::to_string(w.result.verifiedShapes));
        }
    }

    int runShow(const Args& a)
    {
        if (a.positionals().size() != 1) {
            std::cerr << "usage: kloop session show DIR [--json]\n";
            return kExitUsage;
        }
        LoadReport report;
        const Session s = SessionStore::load(a.positionals()[0], &report);
        const auto best = bestAcceptedId(s);
        if (a.has("json")) {
            Json cands = Json::array();
            for (const auto& id : s.tree.order()) {
                Json cj = toJson(s.tree.at(id), false);
                cj["display_state"] = displayState(s.tree.at(id));
                if (const auto it = s.evaluations.find(id); it != s.evaluations.end())
                    cj["objective"] = it->second.objective;
                cands.push_back(cj);
            }
            Json hyps = Json::array();
            for (const auto& [id, h] : s.hypotheses)
                hyps.push_back(toJson(h));
            Json j = { { "id", s.id }, { "problem", s.problemName }, { "device", toJson(s.device) },
                { "settings", toJson(s.settings) }, { "head", s.tree.head() }, { "best", best ? Json(*best) : Json() },
                { "candidates", cands }, { "hypotheses", hyps }, { "events", report.eventsLoaded },
                { "warnings", report.warnings }, { "leaderboards", leaderboards(s) }, { "regimes", regimesJson(s) } };
            std::cout << j.dump(2) << "\n";
            return kExitOk;
        }
        std::cout << "session " << s.id << "  problem " << s.problemName << "  device "
                  << (s.device.name.empty() ? "(none yet)" : s.device.name) << "\n";
        std::cout << s.tree.size() << " candidates, " << s.hypotheses.size() << " hypotheses, " << report.eventsLoaded
                  << " events; head " << (s.tree.head().empty() ? "-" : s.tree.head()) << " (*), best "
                  << (best ? *best : "-") << "\n";
        for (const auto& w : report.warnings)
            std::cout << "warning: " << w << "\n";
        for (const auto& root : s.tree.roots())
            printTree(s, root, 1);
        printRegimes(s);
        const Json boards = leaderboards(s);
        for (const auto& [gpu, board] : boards.items()) {
            std::string workers;
            for (const auto& w : board["workers"])
                workers += (workers.empty() ? "" : ", ") + w.get<std::string>();
            std::cout << "leaderboard " << gpu << " (" << board["evaluations"].get<int>() << " evaluations on "
                      << workers << ")";
            if (board["accepted"].empty())
                std::cout << ": nothing accepted";
            std::cout << "\n";
            int rank = 0;
            for (const auto& e : board["accepted"]) {
                if (++rank > 5)
                    break;
                char buf[64];
                std::snprintf(buf, sizeof buf, "%.3fx", e["objective"].get<double>());
                std::cout << "  " << rank << ". " << e["candidate"].get<std::string>() << "  " << buf << "  on "
                          << e["worker"].get<std::string>() << "\n";
            }
        }
        return kExitOk;
    }

    int runList(const Args& a)
    {
        const fs::path root = a.positionals().empty() ? fs::path(".") : fs::path(a.positionals()[0]);
        Json list = Json::array();
        std::error_code ec;
        for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
            if (!it->is_directory() || !fs::exists(it->path() / "session.json"))
                continue;
            Json row = { { "dir", it->path().string() } };
            try {
                const Session s = SessionStore::load(it->path());
                row["id"] = s.id;
                row["problem"] = s.problemName;
                row["candidates"] = s.tree.size();
                row["device"] = s.device.name;
            } catch (const std::exception& e) {
                row["error"] = e.what();
            }
            list.push_back(row);
        }
        if (ec) {
            std::cerr << "kloop session list: cannot read " << root.string() << ": " << ec.message() << "\n";
            return kExitFailure;
        }
        if (a.has("json")) {
            std::cout << list.dump(2) << "\n";
            return kExitOk;
        }
        for (const auto& r : list) {
            if (r.contains("error"))
                std::printf("%-40s  unreadable: %s\n", r["dir"].get<std::string>().c_str(),
                    r["error"].get<std::string>().c_str());
            else
                std::printf("%-40s  %-20s %-14s %4zu candidates\n", r["dir"].get<std::string>().c_str(),
                    r["id"].get<std::string>().c_str(), r["problem"].get<std::string>().c_str(),
                    r["candidates"].get<std::size_t>());
        }
        if (list.empty())
            std::cout << "no sessions in " << root.string() << "\n";
        return kExitOk;
    }

    int runDiff(const Args& a)
    {
        if (a.positionals().size() != 3 && a.positionals().size() != 2) {
            std::cerr << "usage: kloop session diff DIR A [B] [--json] [--context N]\n"
                         "       (without B, A is compared with its parent)\n";
            return kExitUsage;
        }
        const Session s = SessionStore::load(a.positionals()[0]);
        const std::string aId = a.positionals()[1];
        if (!s.tree.contains(aId))
            throw InputError("no candidate '" + aId + "' in session " + s.id);
        std::string bId;
        std::string oldId = aId;
        if (a.positionals().size() == 3) {
            bId = a.positionals()[2];
        } else {
            bId = aId;
            oldId = s.tree.at(aId).parentId;
            if (oldId.empty())
                throw InputError(aId + " is a root: it has no parent to compare with");
        }
        if (!s.tree.contains(bId))
            throw InputError("no candidate '" + bId + "' in session " + s.id);
        // Any number of lines is a valid request (more than the text has shows all of it), so a large one is clamped,
        // not refused; what is not a whole number of lines is.
        const std::string contextText = a.optionOr("context", "3");
        std::size_t used = 0;
        long long contextLines = -1;
        try {
            contextLines = std::stoll(contextText, &used);
        } catch (const std::out_of_range&) {
            contextLines = std::numeric_limits<long long>::max();
            used = contextText.size();
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != contextText.size() || contextLines < 0) {
            std::cerr << "kloop session diff: --context expects a number of lines (0 or more), got '"
                      << abbreviate(contextText) << "'\n";
            return kExitUsage;
        }
        const int context = static_cast<int>(std::min<long long>(contextLines, std::numeric_limits<int>::max()));
        const std::string& oldText = s.tree.at(oldId).source;
        const std::string& newText = s.tree.at(bId).source;
        const std::vector<ParamChange> params = paramDiff(s.tree.at(oldId).params, s.tree.at(bId).params);
        if (a.has("json")) {
            Json hunks = Json::array();
            for (const auto& h : diffHunks(oldText, newText, context)) {
                Json lines = Json::array();
                for (const auto& l : h.lines)
                    lines.push_back({ { "kind",
                                          l.kind == DiffLine::Kind::Added         ? "added"
                                              : l.kind == DiffLine::Kind::Removed ? "removed"
                                                                                  : "context" },
                        { "text", l.text }, { "old", l.oldLine }, { "new", l.newLine } });
                hunks.push_back({ { "old_start", h.oldStart }, { "old_count", h.oldCount }, { "new_start", h.newStart },
                    { "new_count", h.newCount }, { "lines", lines } });
            }
            Json paramJson = Json::array();
            for (const auto& p : params)
                paramJson.push_back({ { "name", p.name }, { "old", p.oldValue ? Json(*p.oldValue) : Json() },
                    { "new", p.newValue ? Json(*p.newValue) : Json() } });
            std::cout << Json { { "old", oldId }, { "new", bId }, { "params", paramJson }, { "hunks", hunks } }.dump(2)
                      << "\n";
        } else {
            for (const auto& p : params)
                std::cout << "param " << p.text() << "\n";
            const std::string d = unifiedDiff(oldText, newText, oldId + "/" + candidateSourceFileName(oldText),
                bId + "/" + candidateSourceFileName(newText), context);
            if (d.empty())
                std::cout << (params.empty() ? "(no differences)\n" : "(identical sources)\n");
            else
                std::cout << d;
        }
        return kExitOk;
    }

    // The engineer's decision on a candidate the referee sent to review, from a shell (a GPU host without the
    // workbench): posted to the session's inbox, as the workbench posts it, because only the session's writer
    // appends to its journal.
    int runReview(const Args& a)
    {
        if (a.positionals().size() != 2 || a.has("approve") == a.has("reject")) {
            std::cerr << "usage: kloop session review DIR CANDIDATE --approve|--reject [--note TEXT] [--json]\n";
            return kExitUsage;
        }
        const fs::path dir = a.positionals()[0];
        const std::string id = a.positionals()[1];
        const Session s = SessionStore::load(dir);
        if (!s.tree.contains(id))
            throw InputError("no candidate '" + id + "' in session " + s.id);
        const CandidateStatus status = s.tree.at(id).status;
        if (status != CandidateStatus::PendingReview)
            throw InputError(id + " is " + statusName(status) + ", not pending review: there is nothing to decide");
        InboxRequest r;
        r.kind = InboxRequest::Kind::Review;
        r.candidate = id;
        r.approved = a.has("approve");
        r.text = a.option("note").value_or(
            r.approved ? "approved from the command line" : "rejected from the command line");
        const fs::path posted = postInboxRequest(dir, r);
        if (a.has("json")) {
            std::cout << Json {
                { "session", fs::absolute(dir).string() }, { "candidate", id }, { "approved", r.approved },
                { "note", r.text }, { "request", posted.string() }
            }.dump(2) << "\n";
            return kExitOk;
        }
        std::cout << (r.approved ? "approval" : "rejection") << " of " << id << " posted (" << posted.string()
                  << "): a kloop run writing this session applies it now, otherwise `kloop run --resume "
                  << dir.string() << "` applies it before it proposes anything\n";
        return kExitOk;
    }

    int runVersion(const Args& a)
    {
        const Json features = { { "cuda", bool(KL_FEATURE_CUDA) }, { "cupti", bool(KL_FEATURE_CUPTI) },
            { "nvml", bool(KL_FEATURE_NVML) }, { "gui", bool(KL_FEATURE_GUI) }, { "curl", bool(KL_FEATURE_CURL) },
            { "sqlite", bool(KL_FEATURE_SQLITE) }, { "zlib", bool(KL_FEATURE_ZLIB) },
            { "cuda_toolkit", KL_CUDA_TOOLKIT_VERSION } };
        if (a.has("json")) {
            std::cout << Json { { "version", KL_VERSION }, { "features", features } }.dump(2) << "\n";
            return kExitOk;
        }
        std::cout << "kloop " KL_VERSION "\n";
        for (const auto& [k, v] : features.items())
            std::cout << "  " << k << ": " << (v.is_boolean() ? (v.get<bool>() ? "on" : "off") : v.get<std::string>())
                      << "\n";
        return kExitOk;
    }

    int runProblems(const Args& a)
    {
        Json list = Json::array();
        for (const auto& name : listProblems()) {
            Json row = { { "name", name } };
            try {
                const Problem p = loadProblem(findProblemFolder(name).string());
                row["description"] = p.description;
                row["min_arch"] = p.minArch > 0 ? Json(archName(p.minArch)) : Json(nullptr);
                row["folder"] = findProblemFolder(name).string();
            } catch (const std::exception& e) {
                row["error"] = e.what();
            }
            list.push_back(row);
        }
        if (a.has("json")) {
            std::cout << list.dump(2) << "\n";
            return kExitOk;
        }
        for (const auto& r : list) {
            const bool readable = !r.contains("error");
            const std::string archs = !readable ? ""
                : r["min_arch"].is_null()       ? "any arch"
                                                : r["min_arch"].get<std::string>() + "+";
            std::printf("%-16s %-8s %s\n", r["name"].get<std::string>().c_str(), archs.c_str(),
                readable ? r["description"].get<std::string>().c_str()
                         : ("unreadable: " + r["error"].get<std::string>()).c_str());
        }
        return kExitOk;
    }

    const CommandRegistration regNew { { "session new", "create a session directory for a problem",
        "kloop session new DIR --problem NAME [--from-trace TRACE [--max-shapes N]] [--regimes problem|single] [--id "
        "ID]\n"
        "          [--json]\n"
        "Creates DIR with session.json and a journal, seeded with the problem's baseline "
        "(root) and its tunable template (child).\n"
        "--from-trace: the tuning shapes are the shapes the traced model ran the problem at (its problem.json\n"
        "\"trace_match\" rules find them), weighted by their share of its GPU time, at most N (8); the session\n"
        "keeps its own copy of the problem in DIR/problem. Held-out shapes still span the whole validity range.\n"
        "--regimes single: one best over every shape, not one per shape regime of problem.json.",
        { "json" }, { "problem", "id", "agent", "from-trace", "max-shapes", "regimes" }, &runNew } };
    const CommandRegistration regShow { { "session show", "print a session's candidate tree",
        "kloop session show DIR [--json]\n"
        "Loads the session read-only; a torn last journal line is reported, not fatal.",
        { "json" }, {}, &runShow } };
    const CommandRegistration regList { { "session list", "list the sessions in a folder",
        "kloop session list [ROOT] [--json]", { "json" }, {}, &runList } };
    const CommandRegistration regDiff { { "session diff", "unified diff between two candidates",
        "kloop session diff DIR A [B] [--context N] [--json]\n"
        "Without B, compares A with its parent. Parameter values are shown as a header.",
        { "json" }, { "context" }, &runDiff } };
    const CommandRegistration regReview { { "session review", "approve or reject a candidate waiting for review",
        "kloop session review DIR CANDIDATE --approve|--reject [--note TEXT] [--json]\n"
        "The decision goes to the session's inbox, as the workbench's does: a kloop run writing the session applies\n"
        "it at once, otherwise the next `kloop run --resume DIR` applies it before its first proposal. An approved\n"
        "candidate that was evaluated still has to beat the best of some regime to become the best.",
        { "json", "approve", "reject" }, { "note" }, &runReview } };
    const CommandRegistration regVersion { { "version", "print the version and the build's features",
        "kloop version [--json]", { "json" }, {}, &runVersion } };
    const CommandRegistration regProblems { { "problems", "list the problems in the catalogue",
        "kloop problems [--json]\nSearch path: $KL_PROBLEMS_DIR, then the bundled "
        "kernels/problems.",
        { "json" }, {}, &runProblems } };

} // namespace
} // namespace kl::cli
