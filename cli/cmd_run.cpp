// kloop run: the research loop on the local GPU with the built-in tuner.
#include "agent/agent_factory.h"
#include "agent/llm/llm_agent.h"
#include "agent/tuner/strategy.h"
#include "agent/tuner/tuner_agent.h"
#include "agent/tuning_db/tuning_database.h"
#include "cli/command.h"
#include "core/catalogue.h"
#include "core/errors.h"
#include "core/gpu_run_lock.h"
#include "core/json_io.h"
#include "core/loop_objective.h"
#include "core/research_loop.h"
#include "core/session_inbox.h"
#include "core/session_store.h"
#include "kl_build_features.h"

#if KL_FEATURE_CUDA
#include "kernels/gpu_evaluator.h"
#include "kernels/gpu_profiler.h"
#include "kernels/pool/worker_pool.h"
#endif
#include "kernels/pool/worker_spec.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;

namespace kl::cli {
namespace {

    std::atomic<int> g_signal { 0 };

    extern "C" void onSignal(int sig)
    {
        g_signal.store(sig);
    }

    // "T=16,H=8192;T=4096,H=8192" (weights with "@w": "T=16,H=8192@2").
    std::vector<Shape> parseShapes(const std::string& text, const Problem& p)
    {
        std::vector<Shape> out;
        std::stringstream all(text);
        std::string item;
        while (std::getline(all, item, ';')) {
            if (item.empty())
                continue;
            Shape s;
            const auto at = item.find('@');
            if (at != std::string::npos) {
                try {
                    s.weight = std::stod(item.substr(at + 1));
                } catch (...) {
                    throw InputError("--shapes: bad weight in '" + item + "'");
                }
                item = item.substr(0, at);
            }
            std::stringstream dims(item);
            std::string kv;
            while (std::getline(dims, kv, ',')) {
                const auto eq = kv.find('=');
                if (eq == std::string::npos)
                    throw InputError("--shapes: expected NAME=VALUE, got '" + kv + "'");
                try {
                    s.dims[kv.substr(0, eq)] = std::stoll(kv.substr(eq + 1));
                } catch (...) {
                    throw InputError("--shapes: bad value in '" + kv + "'");
                }
            }
            s = p.withConstants(std::move(s));
            std::string why;
            if (!p.shapeIsValid(s, &why))
                throw InputError("--shapes: " + s.label() + " is not a valid shape of " + p.name + ": " + why);
            out.push_back(s);
        }
        if (out.empty())
            throw InputError("--shapes: no shape given");
        return out;
    }

    [[maybe_unused]] std::string sessionIdFromDir(const fs::path& dir) // unused without CUDA
    {
        std::string name = fs::absolute(dir).lexically_normal().filename().string();
        std::string id;
        for (char c : name)
            id += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '-';
        return id.empty() ? std::string("session") : id.substr(0, 64);
    }

    [[maybe_unused]] std::string paramsText(const ParamValues& p)
    {
        std::string s;
        for (const auto& [k, v] : p)
            s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
        return s;
    }

    // One line per event on a pipe; a redrawn bar on a terminal.
    class Progress {
    public:
        Progress(bool json, bool tty, int budget, std::string sessionDir)
            : m_json(json)
            , m_tty(tty)
            , m_budget(budget)
            , m_sessionDir(std::move(sessionDir))
        {
        }

        void onEvent(const Event& e)
        {
            std::lock_guard lock(m_mutex);
            // The run waits for the engineer here: say so on stderr (stdout may be the JSON event stream).
            if (e.kind == EventKind::CandidateStatus && e.data.value("status", std::string()) == "pending-review")
                std::cerr << (m_tty && !m_json ? "\r\033[K" : "") << "kloop run: " << e.candidateId
                          << " waits for your review: approve or reject it in the workbench (kernelloop --session "
                          << m_sessionDir << "); the run continues when you decide\n"
                          << std::flush;
            if (m_json) {
                std::cout << eventToJson(e).dump() << "\n" << std::flush;
                return;
            }
            if (e.kind == EventKind::BestChanged) {
                m_best = e.candidateId;
                m_bestObjective = e.data.value("objective", 0.0);
            }
            if (e.kind == EventKind::Note && e.data.contains("text"))
                message(e.data["text"].get<std::string>());
            if (e.kind == EventKind::SessionState)
                message(
                    "session " + e.data.value("state", std::string()) + ": " + e.data.value("reason", std::string()));
            if (e.kind != EventKind::CandidateAccepted && e.kind != EventKind::CandidateRejected)
                return;
            ++m_done;
            const std::string status = e.data.value("status", std::string());
            std::string reason = e.data.value("reason", std::string());
            if (reason.size() > 90)
                reason = reason.substr(0, 87) + "...";
            if (!m_tty) {
                std::cout << e.candidateId << " " << status << "  " << reason << "\n" << std::flush;
                return;
            }
            draw(e.candidateId + " " + status);
        }

        void finish()
        {
            std::lock_guard lock(m_mutex);
            if (m_tty && !m_json)
                std::cout << "\n";
        }

    private:
        void message(const std::string& text)
        {
            if (m_tty)
                std::cout << "\r\033[K" << text << "\n";
            else
                std::cout << text << "\n";
            std::cout << std::flush;
        }

        void draw(const std::string& last)
        {
            constexpr int width = 30;
            const double frac = m_budget > 0 ? std::min(1.0, static_cast<double>(m_done) / m_budget) : 0.0;
            const int filled = static_cast<int>(frac * width);
            char best[96] = "best -";
            if (!m_best.empty())
                std::snprintf(best, sizeof best, "best %.3fx (%s)", m_bestObjective, m_best.c_str());
            std::cout << "\r\033[K[" << std::string(static_cast<std::size_t>(filled), '#')
                      << std::string(static_cast<std::size_t>(width - filled), '.') << "] " << m_done;
            if (m_budget > 0)
                std::cout << "/" << m_budget;
            std::cout << "  " << best << "  last " << last << std::flush;
        }

        std::mutex m_mutex;
        bool m_json;
        bool m_tty;
        int m_budget;
        std::string m_sessionDir;
        int m_done = 0;
        std::string m_best;
        double m_bestObjective = 0;
    };

    int runRun(const Args& a)
    {
        const bool json = a.has("json");
        const bool resuming = a.has("resume");
        if (!resuming && (!a.option("problem") || !a.option("session"))) {
            std::cerr << "usage: kloop run --problem NAME --agent tuner:<strategy> --session DIR [--budget N] "
                         "[--minutes M]\n       kloop run --resume DIR [--agent SPEC] [--budget N] [--minutes M]\n";
            return kExitUsage;
        }
        Budget budget;
        budget.maxEvaluations = static_cast<int>(a.integer("budget", budget.maxEvaluations, 0, 1'000'000'000));
        budget.maxMinutes = a.real("minutes", budget.maxMinutes, 0, 1e9);
        budget.convergenceWindow = static_cast<int>(a.integer("converge", budget.convergenceWindow, 0, 1'000'000'000));

        std::unique_ptr<SessionStore> store;
        // A resumed session is read here and opened for writing only once the GPU is there: opening cuts a torn
        // journal tail, and a run that cannot start must not change the session.
        std::optional<Session> recorded;
        std::string agentSpec = a.optionOr("agent", "tuner:bayes");
        std::string problemArg;
        std::string shapesText = a.optionOr("shapes", "");
        if (resuming) {
            const fs::path dir = *a.option("resume");
            LoadReport report;
            recorded = SessionStore::load(dir, &report);
            for (const auto& w : report.warnings)
                std::cerr << "kloop run: " << w << "\n";
            const Session& s = *recorded;
            if (!a.option("agent"))
                agentSpec = s.settings.agent;
            if (agentSpec.empty()) {
                std::cerr << "kloop run: session " << dir.string()
                          << " records no agent (kloop session new without --agent); say which one runs it, e.g. "
                             "kloop run --resume "
                          << dir.string() << " --agent tuner:bayes (or llm:<provider>, llm:<provider>+tuner:bayes)\n";
                return kExitUsage;
            }
            problemArg = findSessionProblemFolder(s, {}, dir).string();
            if (shapesText.empty() && s.settings.extra.count("tuning_shapes"))
                shapesText = s.settings.extra.at("tuning_shapes");
            // Without a new budget the session keeps its own.
            if (!a.option("budget"))
                budget.maxEvaluations = s.settings.budget.maxEvaluations;
            if (!a.option("minutes"))
                budget.maxMinutes = s.settings.budget.maxMinutes;
            if (!a.option("converge"))
                budget.convergenceWindow = s.settings.budget.convergenceWindow;
        } else {
            problemArg = *a.option("problem");
        }
        // The candidate language: the template the session starts from and what the LLM agent is asked to write.
        const std::string languageText = a.optionOr("language",
            recorded && recorded->settings.extra.count("language") ? recorded->settings.extra.at("language") : "cuda");
        const auto language = languageFromName(languageText);
        if (!language) {
            std::cerr << "kloop run: --language must be cuda or triton, got '" << languageText << "'\n";
            return kExitUsage;
        }
        AgentFactoryOptions agentOptions;
        // The LLM agent's prompts, replies, usage and verdicts go to the session journal; the store may be
        // created below, after the agent, and outlives it (declared earlier in this scope).
        // The reply as it streams goes to <session>/live/ for the workbench (the journal gets it when complete).
        std::mutex liveMutex; // the agent records from the loop's threads
        std::unique_ptr<LiveStreamWriter> liveStream;
        agentOptions.llmHooks = liveStreamingHooks(
            [&store](const nlohmann::json& j) {
                if (store)
                    store->agentMessage(j);
            },
            [&store, &liveStream, &liveMutex]() -> LiveStreamWriter* {
                std::lock_guard lock(liveMutex);
                if (!liveStream && store)
                    liveStream = std::make_unique<LiveStreamWriter>(store->dir());
                return liveStream.get();
            });
        agentOptions.seed = static_cast<std::uint64_t>(a.integer("seed", 1, 0, std::numeric_limits<long long>::max()));
        if (recorded)
            agentOptions.extra = recorded->settings.extra;
        if (*language != KernelLanguage::Cuda)
            agentOptions.extra["language"] = languageText;
        for (const auto& [flag, key] : { std::pair { "llm-settings", "llm.settings_file" },
                 std::pair { "llm-model", "llm.model" }, std::pair { "llm-base-url", "llm.base_url" } })
            if (auto v = a.option(flag))
                agentOptions.extra[key] = *v;
        // The LLM agent records in each proposal whether it waits for review; with auto-approve it does not.
        if (a.has("auto-approve") || (recorded && recorded->settings.autoApproveLlm))
            agentOptions.extra["llm.auto_approve"] = "true";
        std::unique_ptr<Agent> agent;
        try {
            agent = makeAgent(agentSpec, agentOptions);
        } catch (const InputError& e) {
            std::cerr << "kloop run: " << e.what() << "\n";
            return kExitUsage;
        }
        const bool llm = agentSpec.find("llm:") != std::string::npos;
        if (llm) {
            // Before anything is measured: a missing model or key would otherwise surface after the baseline and
            // the template were timed.
            try {
                llm::LlmClient(
                    llmAgentSettingsFor(agentSpec.substr(0, agentSpec.find('+')), agentOptions.extra).provider)
                    .checkConfig();
            } catch (const llm::LlmError& e) {
                std::cerr << "kloop run: " << e.what() << "\n";
                return kExitFailure;
            }
        }
        if (llm && !a.has("auto-approve") && !(recorded && recorded->settings.autoApproveLlm))
            std::cerr << "kloop run: LLM proposals wait for the engineer's review (kernelloop workbench); pass "
                         "--auto-approve to evaluate them unattended (the referee still gates every candidate)\n";
        // The engineer's hypothesis, recorded (human-authored) before the agent's first proposal.
        const std::optional<std::string> hypothesis = a.option("hypothesis");
        if (hypothesis && hypothesis->find_first_not_of(" \t\r\n") == std::string::npos) {
            std::cerr << "kloop run: --hypothesis needs a text (what the agent should try)\n";
            return kExitUsage;
        }
        const std::string regimes = a.optionOr("regimes", "problem");
        if (!SessionSettings::isKnownRegimes(regimes))
            throw UsageError(
                "--regimes is problem (a best per regime of problem.json) or single, got '" + regimes + "'");
        const std::string objective = a.optionOr("objective", "weighted-geomean-speedup");
        if (!isKnownObjective(objective)) {
            std::cerr << "kloop run: unknown objective '" << objective
                      << "' (weighted-geomean-speedup, geomean-speedup, min-speedup)\n";
            return kExitUsage;
        }

        // --workers: a GPU pool (kernels/pool/worker_spec.h); parsed before anything starts so a typo costs nothing.
        std::vector<WorkerSpec> workerSpecs;
        if (auto w = a.option("workers"))
            workerSpecs = parseWorkerSpecs(*w);
        [[maybe_unused]] const bool anyLocal = workerSpecs.empty()
            || std::any_of(workerSpecs.begin(), workerSpecs.end(),
                [](const WorkerSpec& w) { return w.kind == WorkerSpec::Kind::Local; });

        const fs::path folder = findProblemFolder(problemArg);
        Problem problem = loadProblem(folder.string());
        useTemplateFor(problem, *language);
        if (!shapesText.empty())
            problem.tuningShapes = parseShapes(shapesText, problem);

#if KL_FEATURE_CUDA
        // One run per local GPU: a second one would time its kernels against ours and both sessions would record
        // contaminated numbers. With KL_WORKER the worker is elsewhere (or a test double) and this GPU is not ours.
        std::optional<GpuRunLock> gpuLock;
        if (!std::getenv("KL_WORKER") && anyLocal) {
            const std::string sessionDir
                = fs::absolute(resuming ? fs::path(*a.option("resume")) : fs::path(*a.option("session"))).string();
            GpuRunHolder holder;
            try {
                gpuLock = GpuRunLock::tryAcquire(localGpuKey(), sessionDir, &holder);
            } catch (const std::exception& e) {
                std::cerr << "kloop run: " << e.what() << "\n";
                return kExitFailure;
            }
            if (!gpuLock) {
                std::cerr << "kloop run: the GPU is busy: kloop run (pid " << holder.pid << ") is tuning session "
                          << holder.session
                          << "; two runs on one GPU would time each other's kernels. Wait for it, stop it, or follow "
                             "it in the workbench (kernelloop --session DIR)\n";
                return kExitFailure;
            }
        }
        GpuEvaluatorOptions evalOptions;
        if (auto arch = a.option("arch"))
            evalOptions.arch = *arch;
        // --quick: for sweeps; correctness is still verified on every shape, the timing protocol is lighter.
        // Its measurements are keyed apart in the tuning database, so a full run never reuses them.
        const bool quick = a.has("quick")
            || (recorded && recorded->settings.extra.count("protocol")
                && recorded->settings.extra.at("protocol") == "quick");
        if (quick) {
            evalOptions.cupti = false;
            evalOptions.graphCheck = false;
            evalOptions.recheckTimedOutputs = false;
            evalOptions.targetRelCi = 0.02;
            evalOptions.minSamples = 5;
        }
        std::optional<GpuEvaluator> single;
        std::optional<WorkerPool> pool;
        if (workerSpecs.empty())
            single.emplace(problem, evalOptions);
        else
            pool.emplace(problem, workerSpecs, evalOptions);
        Evaluator& evaluator = pool ? static_cast<Evaluator&>(*pool) : *single;
        if (pool) {
            const int started = pool->start();
            for (const PoolWorkerStatus& w : pool->status())
                std::cerr << "kloop run: worker " << w.id << ": "
                          << (w.state == "unavailable" ? "unavailable: " + w.lastError
                                                       : w.gpu + (w.uuid.empty() ? "" : " (" + w.uuid + ")") + " on "
                                         + (w.host.empty() ? std::string("?") : w.host))
                          << "\n";
            if (started == 0) {
                std::cerr << "kloop run: no worker of --workers started (nothing compiled, no session written)\n";
                return kExitFailure;
            }
        }
        DeviceInfo device;
        try {
            device = evaluator.device();
        } catch (const std::exception& e) {
            std::cerr << "kloop run: no usable CUDA GPU: " << e.what()
                      << "\n(kloop run needs a local NVIDIA GPU and the kloop-worker next to kloop; set KL_WORKER to "
                         "point at the worker elsewhere)\n";
            return kExitFailure;
        }
        if (device.empty()) {
            std::cerr << "kloop run: no usable CUDA GPU: the worker reported no device\n";
            return kExitFailure;
        }
        if (const std::string why = problem.archRefusal(archNumber(device)); !why.empty()) {
            std::cerr << "kloop run: " << why << " (nothing compiled, no session written)\n";
            return kExitFailure;
        }
#else
        (void)json;
        (void)store;
        (void)recorded;
        (void)hypothesis;
        std::cerr << "kloop run: this build has no CUDA support (the CUDA toolkit was not found at configure time), so "
                     "there is no GPU to run on\n";
        return kExitFailure;
#endif

#if KL_FEATURE_CUDA
        if (!resuming) {
            Session header;
            const fs::path dir = *a.option("session");
            header.id = a.optionOr("id", sessionIdFromDir(dir));
            header.problemName = problem.name;
            header.problemFolder = folder.string();
            header.device = device;
            header.settings.agent = agentSpec;
            header.settings.objective = objective;
            header.settings.regimes = regimes;
            header.settings.budget = budget;
            header.settings.autoApproveLlm = a.has("auto-approve");
            header.settings.extra = agentOptions.extra;
            if (quick)
                header.settings.extra["protocol"] = "quick";
            if (!shapesText.empty())
                header.settings.extra["tuning_shapes"] = shapesText;
            header.createdMs = nowMs();
            store = SessionStore::create(dir, header);
            // The naive baseline is the root; the tunable template at its defaults branches from it and is the head.
            const auto seeded = seedProblemCandidates(*store, problem, folder, archNumber(device));
            if (!seeded.empty())
                store->moveHead(seeded.back().first, "the template is where tuning starts");
        } else {
            store = SessionStore::open(*a.option("resume")); // its warnings were printed when it was read
        }
        if (resuming && store->session().device.name != device.name) {
            std::cerr << "kloop run: warning: the session was recorded on " << store->session().device.name
                      << ", this GPU is " << device.name << "\n";
        }

        std::unique_ptr<TuningDatabase> db;
        if (!a.has("no-tuning-db")) {
            const fs::path dbPath
                = a.option("tuning-db") ? fs::path(*a.option("tuning-db")) : defaultTuningDatabasePath();
            std::vector<std::string> warnings;
            try {
                db = TuningDatabase::open(dbPath, &warnings);
            } catch (const InputError& e) {
                // The default database is shared by every run: one bad file must not look like a dead end.
                throw InputError(std::string(e.what())
                    + " (--no-tuning-db runs without it, --tuning-db FILE uses another; nothing is reused then)");
            }
            for (const auto& w : warnings)
                std::cerr << "kloop run: " << w << "\n";
        }

        LoopOptions options;
        options.cache = db.get();
        options.budgetOverride = budget;
        options.evaluate.heldOutShapes = !a.has("no-held-out");
        options.measurementProtocol = quick ? "quick" : "";
        options.compileThreads = static_cast<int>(a.integer("compile-threads", 4, 1, 256));
        options.pipelineDepth = static_cast<int>(a.integer("pipeline", 4, 1, 1024));

        // An LLM agent reads the profile of each new best (DRAM/SM throughput, occupancy, bound) in its next prompt.
        options.deviceThreads = pool ? static_cast<int>(pool->size()) : 1;
        std::optional<GpuProfiler> profiler;
        std::optional<PoolProfiler> poolProfiler;
        if (llm && pool) {
            poolProfiler.emplace(*pool);
            options.profiler = &*poolProfiler;
        } else if (llm) {
            profiler.emplace(*single);
            options.profiler = &*profiler;
        }

        const bool tty = ::isatty(STDOUT_FILENO) != 0;
        Progress progress(json, tty, budget.maxEvaluations, store->dir().string());
        const auto token = store->bus().subscribe([&](const Event& e) { progress.onEvent(e); });

        ResearchLoop loop(*store, evaluator, *agent, options);
        if (hypothesis)
            loop.addHypothesis(*hypothesis);
        std::optional<PoolStatusWriter> poolStatus; // the workbench's Workers panel reads it
        if (pool)
            poolStatus.emplace(*pool, store->dir(), [&](const std::string& loss) { store->note(loss); });
        g_signal.store(0);
        std::signal(SIGINT, onSignal);
        std::signal(SIGTERM, onSignal);
        std::signal(SIGUSR1, onSignal);
        std::atomic<bool> done { false };
        // The workbench and `kloop session review` steer a session through its inbox (they cannot write the
        // journal). Requests posted while no run was writing are applied before this run proposes anything, so a
        // review decided between runs counts from the first proposal on; later ones as they arrive.
        auto applyInbox = [&] {
            const InboxBatch inbox = takeInboxRequests(store->dir());
            for (const auto& err : inbox.errors)
                store->note("inbox: ignored a malformed request: " + err);
            for (const InboxRequest& req : inbox.requests) {
                try {
                    switch (req.kind) {
                    case InboxRequest::Kind::Review:
                        loop.review(req.candidate, req.approved, req.text);
                        break;
                    case InboxRequest::Kind::Branch:
                        loop.branchFrom(req.candidate, req.text.empty() ? "picked by the engineer" : req.text);
                        break;
                    case InboxRequest::Kind::Hypothesis:
                        loop.addHypothesis(req.text);
                        break;
                    case InboxRequest::Kind::Pause:
                        loop.pause();
                        break;
                    case InboxRequest::Kind::Resume:
                        loop.resume();
                        break;
                    case InboxRequest::Kind::Stop:
                        loop.requestStop(req.text.empty() ? "stopped from the workbench" : req.text);
                        break;
                    }
                } catch (const InputError& e) {
                    store->note(std::string("inbox: ") + inboxKindName(req.kind) + " request not applied: " + e.what());
                }
            }
        };
        applyInbox();
        std::thread watcher([&] {
            while (!done.load()) {
                if (const int sig = g_signal.exchange(0)) {
                    if (sig == SIGUSR1)
                        loop.isPaused() ? loop.resume() : loop.pause();
                    else
                        loop.requestStop(sig == SIGINT ? "interrupted (Ctrl-C)" : "terminated by a signal");
                }
                applyInbox();
                if (poolStatus)
                    poolStatus->update();
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            if (poolStatus)
                poolStatus->update(); // the pool as the run left it
        });
        LoopResult r;
        try {
            r = loop.run();
        } catch (...) {
            done = true;
            watcher.join();
            throw;
        }
        done = true;
        watcher.join();
        std::signal(SIGINT, SIG_DFL);
        std::signal(SIGTERM, SIG_DFL);
        std::signal(SIGUSR1, SIG_DFL);
        store->bus().unsubscribe(token);
        progress.finish();

        const Session& s = store->session();
        Json summary
            = { { "state", r.state }, { "reason", r.reason }, { "session", fs::absolute(store->dir()).string() },
                  { "evaluated", r.evaluatedThisRun }, { "recorded", r.recordedThisRun }, { "reused", r.reusedThisRun },
                  { "best", r.best.value_or("") }, { "bestObjective", r.bestObjective } };
        if (r.best)
            summary["bestParams"] = s.tree.at(*r.best).params;
        if (json) {
            std::cout << Json { { "summary", summary } }.dump() << "\n";
        } else {
            std::cout << r.state << ": " << r.reason << "\n"
                      << "  evaluated " << r.evaluatedThisRun << ", reused " << r.reusedThisRun
                      << " from the tuning database\n";
            if (r.best) {
                char buf[64];
                std::snprintf(buf, sizeof buf, "%.3fx", r.bestObjective);
                std::cout << "  best " << *r.best << ": " << buf << " (" << objective << ")  "
                          << paramsText(s.tree.at(*r.best).params) << "\n";
            } else {
                std::cout << "  no candidate beat the baseline\n";
            }
            std::cout << "  resume with: kloop run --resume " << store->dir().string() << "\n";
        }
        if (r.state == "failed")
            std::cerr << "kloop run: " << r.reason << "\n"; // stdout may be JSON events; the cause belongs on stderr
        return r.state == "failed" ? kExitFailure : kExitOk;
#endif
    }

    int runGuarded(const Args& a)
    {
        try {
            return runRun(a);
        } catch (const InputError& e) {
            std::cerr << "kloop run: " << e.what() << "\n";
            return kExitFailure;
        }
    }

    const CommandRegistration reg { { "run", "tune a problem on the local GPU with the research loop",
        "kloop run --problem NAME|DIR --agent SPEC --session DIR [--budget N] [--minutes M]\n"
        "          [--converge N] [--objective NAME] [--regimes problem|single]\n"
        "          [--shapes \"T=16,H=8192;T=4096,H=8192@3\"] [--seed N]\n"
        "          [--tuning-db FILE | --no-tuning-db] [--no-held-out] [--compile-threads N] [--pipeline N]\n"
        "          [--hypothesis TEXT] [--arch sm_90a] [--language cuda|triton] [--quick] [--auto-approve]\n"
        "          [--llm-settings FILE] "
        "[--llm-model M] [--llm-base-url "
        "URL] "
        "[--json]\n"
        "          [--workers SPEC[,SPEC...]]   SPEC: local, local:GPU, ssh:[USER@]HOST[:GPU], ssh:HOST:PORT:GPU,\n"
        "          slurm:PARTITION[:COUNT] or a workers.json file; one evaluation per worker at a time\n"
        "SPEC: tuner:<strategy>, llm:<provider> or llm:<provider>+tuner:<strategy> (default tuner:bayes).\n"
        "kloop run --resume DIR [--agent SPEC] [--budget N] [--minutes M] [--json]   (--agent: when the session "
        "records\n  none, e.g. made by kloop session new)\n\n"
        "--hypothesis TEXT records the engineer's hypothesis in the session (human-authored) before the agent's "
        "first\nproposal: an LLM agent's prompts carry it, and the candidates proposed under it are linked to it.\n\n"
        "Runs propose -> compile -> verify -> time -> decide -> record until the budget (evaluations, minutes), "
        "convergence\n(no accepted improvement in N evaluations), Ctrl-C, or the search space is exhausted. "
        "Strategies: "
        "exhaustive,\nrandom, anneal, genetic, bayes. A candidate is accepted only when correct on every verification "
        "shape and\nfaster than the best with the 95% interval of the ratio above 1 (--regimes problem, the default: "
        "faster "
        "than the\nbest of some shape regime of problem.json on that regime's shapes; single: one best over every "
        "shape). Every\nmeasured configuration goes "
        "to the\ntuning database (default ~/.cache/kernelloop/tuning.jsonl) and is never measured again. --resume "
        "continues a\nsession after a crash or kill -9; nothing recorded is measured twice. kill -USR1 pauses and "
        "resumes. --json prints one JSON "
        "object per event\nand a final {\"summary\": ...}. Exit codes: 0 finished or stopped, 1 failure (no GPU, "
        "evaluator failure),\n2 usage.",
        { "json", "no-tuning-db", "no-held-out", "auto-approve", "quick" },
        { "problem", "agent", "session", "resume", "budget", "minutes", "converge", "objective", "regimes", "shapes",
            "seed", "tuning-db", "compile-threads", "pipeline", "arch", "id", "llm-settings", "llm-model",
            "llm-base-url", "language", "workers", "hypothesis" },
        &runGuarded } };

} // namespace
} // namespace kl::cli
