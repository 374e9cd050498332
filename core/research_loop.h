#pragma once
// The research loop: propose -> compile -> verify -> time -> decide -> record -> repeat.
//
// Threads: run() is the coordinator (it alone talks to the agent and writes the store), a compile pool
// calls Evaluator::compile on the proposals queued ahead, and one device thread calls Evaluator::evaluate,
// so the GPU never waits for NVRTC. Everything is recorded through the SessionStore; after a crash,
// constructing a loop on the reopened store and calling run() continues where it stopped: recorded
// evaluations are never repeated, unfinished candidates are evaluated first.
#include "core/agent.h"
#include "core/evaluator.h"
#include "core/loop_measurement_cache.h"
#include "core/loop_objective.h"
#include "core/profile_summary.h"
#include "core/session_store.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kl {

struct LoopOptions {
    int compileThreads = 2;
    // Device threads calling Evaluator::evaluate at once: 1 for one GPU, the pool's size for a GPU pool (the
    // evaluator must then be safe to call concurrently, as kernels/pool/worker_pool is).
    int deviceThreads = 1;
    int pipelineDepth = 4; // candidates proposed and compiled ahead of the device
    EvaluateOptions evaluate;
    MeasurementCache* cache = nullptr; // the tuning database; nullptr: only this session's records are reused
    std::optional<Budget> budgetOverride; // e.g. a larger budget given when resuming; else the session's
    std::string measurementProtocol; // non-empty when the evaluator measures in a non-default way (tuning-db key)
    // Profiles each new best on the device thread; its summary goes into the agent's next prompt (the agent is not
    // asked while the profile of the current best is on its way). nullptr: no profiling.
    Profiler* profiler = nullptr;
};

struct LoopResult {
    std::string state; // "finished", "stopped" or "failed"
    std::string reason; // why it stopped, in words
    int evaluatedThisRun = 0; // Evaluator::evaluate calls
    int recordedThisRun = 0; // evaluations recorded (including reuses and pruned configurations)
    int reusedThisRun = 0; // taken from the tuning database or this session's records instead of measured
    std::optional<CandidateId> best;
    double bestObjective = 0;
};

class ResearchLoop {
public:
    ResearchLoop(SessionStore& store, Evaluator& evaluator, Agent& agent, LoopOptions options = {});
    ~ResearchLoop();
    ResearchLoop(const ResearchLoop&) = delete;
    ResearchLoop& operator=(const ResearchLoop&) = delete;

    // Blocks until a stop condition holds. Call it from one thread; the other members are thread-safe.
    LoopResult run();

    // The user's stop: no new evaluation starts; the one on the device finishes and is recorded unless
    // cancelInFlight (then it is dropped unrecorded and evaluated again on resume).
    void requestStop(const std::string& reason = "stopped by the user", bool cancelInFlight = false);
    void pause();
    void resume();
    bool isPaused() const;
    // Rollback / branch: the next proposals branch from this node. Nothing is deleted.
    void branchFrom(const CandidateId& id, const std::string& why = "picked by the engineer");
    // The engineer's hypothesis for the agent's next proposals; recorded by the loop's own thread.
    void addHypothesis(const std::string& text);
    // The engineer's decision on a PendingReview candidate: before evaluation, approval queues it; after,
    // approval accepts it if it still beats the best.
    void review(const CandidateId& id, bool approved, const std::string& reason);

    std::optional<CandidateId> best() const;

private:
    struct Job {
        Candidate candidate;
        bool compiled = false;
        bool compileStarted = false;
        CompileReport report;
        std::optional<VerdictReason> pruned; // after compilation: the device cannot run it
    };
    struct Message {
        enum class Kind { Started, Finished, Failed, Profiled } kind = Kind::Finished;
        CandidateId id;
        Candidate candidate;
        Evaluation evaluation;
        bool measured = false; // evaluate() ran (false: compile failure or pruning)
        std::string error;
        std::optional<CandidateProfile> profile; // Profiled: empty when the profiler failed (error says why)
    };

    void compileWorker();
    void deviceWorker();
    void runProfile(const Candidate& subject, const CancelToken& cancel); // device thread
    void runCommand(std::function<void()> cmd);

    // Coordinator-only (run()'s thread, or the caller while no run() is active).
    void restoreFromStore();
    void askAgent(int count, int evaluationsLeft); // evaluationsLeft: budgetLeft() when count was taken
    void enqueue(Candidate c); // by value: store writes invalidate references into the session
    void handle(Message& m);
    void recordDecided(Candidate c, Evaluation raw, bool measured); // copies, as enqueue
    void reviewNow(const CandidateId& id, bool approved, const std::string& reason);
    std::optional<std::string> stopCondition();
    int budgetLeft() const;
    const Budget& budget() const;
    void emitStep(EventKind kind, const CandidateId& id, nlohmann::json data);
    void setBest(const CandidateId& id, const ObjectiveValue& v, const std::vector<RegimeResult>& regimes = {});
    std::vector<RegimeStanding> regimeStandings() const; // under m_mutex
    void requestProfile(const CandidateId& id); // of the best, when a profiler is set and it has none yet
    void handleProfiled(const Message& m);
    const Session& session() const { return m_store.session(); }

    SessionStore& m_store;
    Evaluator& m_evaluator;
    Agent& m_agent;
    LoopOptions m_options;

    // Shared with the workers, under m_mutex.
    mutable std::mutex m_mutex;
    std::condition_variable m_cv;
    std::list<std::shared_ptr<Job>> m_jobs; // waiting for the device, in proposal order
    std::deque<std::shared_ptr<Job>> m_compileQueue;
    std::deque<Message> m_messages;
    std::deque<std::function<void()>> m_commands;
    std::set<std::string> m_onDevice; // candidates being evaluated
    bool m_running = false;
    bool m_shutdown = false;
    bool m_stopRequested = false;
    bool m_dropInFlight = false;
    // Measured evaluations handed to the loop thread and not yet decided: the device waits for none, so the best it
    // hands the next evaluation (the referee's jump and single-shape checks) is never one decision stale.
    int m_undecided = 0;
    std::string m_stopReason;
    bool m_paused = false;
    CancelToken m_deviceCancel;
    std::optional<Candidate> m_profileWanted; // for the device thread: profile this before the next evaluation
    CancelToken m_agentCancel; // handed to Agent::propose; a stop cancels it, so an outstanding LLM request ends

    // Coordinator state.
    std::optional<CandidateId> m_best;
    std::optional<ObjectiveValue> m_bestValue;
    // The best accepted objective per GPU model: a decision compares only measurements of one model (a pool of
    // different GPUs keeps one leaderboard per model). Keyed by Evaluation::measuredOn.gpu, the session's device
    // for evaluations recorded without it.
    std::map<std::string, ObjectiveValue> m_bestByGpu;
    std::string gpuModelOf(const Evaluation& e) const;
    std::optional<CurrentBest> m_refereeBest; // what evaluate() is told about the best (EvaluateOptions::best)
    std::map<std::string, CurrentBest> m_refereeBestByGpu; // EvaluateOptions::bestByGpu
    // The session's regimes (SessionSettings::regimes "problem": the problem's; empty: one best over every shape),
    // fixed at construction, and each one's best so far (by index), under m_mutex.
    std::vector<Regime> m_regimes;
    std::vector<std::optional<ObjectiveValue>> m_regimeBest;
    std::vector<std::string> m_regimeBestId;
    std::map<std::string, Evaluation> m_measured; // key digest -> the evaluator's output, this session
    int m_sinceImprovement = 0;
    bool m_agentExhausted = false;
    bool m_agentWaiting = false; // the agent returned nothing while work was in flight
    std::int64_t m_startMs = 0;
    std::int64_t m_pausedMs = 0;
    std::int64_t m_pauseStartedMs = 0;
    std::optional<CandidateId> m_profileAwaited; // the agent's next prompt waits for this profile
    LoopResult m_result;
};

} // namespace kl
