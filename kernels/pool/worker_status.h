#pragma once
// What the workbench's Workers panel and `kloop run` show of one pool worker, and the snapshot file `kloop run`
// rewrites in its session while it runs (workers.status.json) so a workbench following the run shows the pool
// live. Needs no CUDA: the workbench reads it.
#include "core/session.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kl {

struct PoolWorkerStatus {
    std::string id;
    std::string transport; // local, ssh, slurm
    std::string state; // starting, idle, busy, lost (reconnecting after a backoff), unavailable
    std::string gpu;
    std::string uuid;
    std::string arch;
    std::string host;
    long pid = 0; // on its host
    std::string candidate; // being evaluated
    int evaluations = 0;
    int lost = 0; // evaluations lost with this worker
    int starts = 0;
    int smClockMHz = 0; // at its last measurement
    int memClockMHz = 0;
    double reconnectInSeconds = 0; // state lost: when the next start is tried
    std::string lastError;
    bool operator==(const PoolWorkerStatus&) const = default;
};

// The whole pool at one moment.
struct PoolSnapshot {
    std::vector<PoolWorkerStatus> workers;
    int waiting = 0; // evaluations waiting for a free worker
    bool operator==(const PoolSnapshot&) const = default;
};

inline constexpr const char* kPoolStatusFile = "workers.status.json";

nlohmann::json toJson(const PoolSnapshot& pool);
// Throws InputError naming `where` and the field.
PoolSnapshot poolSnapshotFromJson(const nlohmann::json& j, const std::string& where);
void writePoolStatus(const std::filesystem::path& sessionDir, const PoolSnapshot& pool);
// The session's snapshot; nullopt when the run wrote none (a single GPU, or an older kloop). Throws InputError.
std::optional<PoolSnapshot> readPoolStatus(const std::filesystem::path& sessionDir);

// Per-worker counts from what the session recorded (Evaluation::measuredOn): what a session shows of its workers
// when no live snapshot is there. State is "recorded"; evaluations counts the measurements, lost the lost ones.
std::vector<PoolWorkerStatus> workersFromMeasurements(const Session& s);

} // namespace kl
