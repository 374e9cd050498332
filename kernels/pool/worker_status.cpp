#include "kernels/pool/worker_status.h"

#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_store.h"

#include <algorithm>
#include <map>

namespace kl {

nlohmann::json toJson(const PoolSnapshot& pool)
{
    nlohmann::json list = nlohmann::json::array();
    for (const auto& w : pool.workers)
        list.push_back({ { "id", w.id }, { "transport", w.transport }, { "state", w.state }, { "gpu", w.gpu },
            { "uuid", w.uuid }, { "arch", w.arch }, { "host", w.host }, { "pid", w.pid }, { "candidate", w.candidate },
            { "evaluations", w.evaluations }, { "lost", w.lost }, { "starts", w.starts },
            { "sm_clock_mhz", w.smClockMHz }, { "mem_clock_mhz", w.memClockMHz },
            { "reconnect_in_s", w.reconnectInSeconds }, { "last_error", w.lastError } });
    return { { "workers", list }, { "waiting", pool.waiting } };
}

PoolSnapshot poolSnapshotFromJson(const nlohmann::json& j, const std::string& where)
{
    using namespace jsonfield;
    if (!j.is_object())
        throw InputError(where + ": expected an object");
    PoolSnapshot pool;
    pool.waiting = static_cast<int>(integerOr(j, "waiting", 0, where, 0, INT32_MAX));
    const auto& list = require(j, "workers", where);
    if (!list.is_array())
        throw InputError(where + ".workers: expected an array");
    for (std::size_t i = 0; i < list.size(); ++i) {
        const auto& e = list[i];
        const std::string at = where + ".workers[" + std::to_string(i) + "]";
        if (!e.is_object())
            throw InputError(at + ": expected an object");
        PoolWorkerStatus w;
        w.id = string(e, "id", at);
        w.transport = stringOr(e, "transport", "", at);
        w.state = string(e, "state", at);
        w.gpu = stringOr(e, "gpu", "", at);
        w.uuid = stringOr(e, "uuid", "", at);
        w.arch = stringOr(e, "arch", "", at);
        w.host = stringOr(e, "host", "", at);
        w.pid = static_cast<long>(integerOr(e, "pid", 0, at, 0));
        w.candidate = stringOr(e, "candidate", "", at);
        w.evaluations = static_cast<int>(integerOr(e, "evaluations", 0, at, 0, INT32_MAX));
        w.lost = static_cast<int>(integerOr(e, "lost", 0, at, 0, INT32_MAX));
        w.starts = static_cast<int>(integerOr(e, "starts", 0, at, 0, INT32_MAX));
        w.smClockMHz = static_cast<int>(integerOr(e, "sm_clock_mhz", 0, at, 0, INT32_MAX));
        w.memClockMHz = static_cast<int>(integerOr(e, "mem_clock_mhz", 0, at, 0, INT32_MAX));
        w.reconnectInSeconds = numberOr(e, "reconnect_in_s", 0, at);
        w.lastError = stringOr(e, "last_error", "", at);
        pool.workers.push_back(std::move(w));
    }
    return pool;
}

void writePoolStatus(const std::filesystem::path& sessionDir, const PoolSnapshot& pool)
{
    writeFileAtomic(sessionDir / kPoolStatusFile, toJson(pool).dump(1) + "\n");
}

std::optional<PoolSnapshot> readPoolStatus(const std::filesystem::path& sessionDir)
{
    const auto file = sessionDir / kPoolStatusFile;
    std::error_code ec;
    if (!std::filesystem::exists(file, ec))
        return std::nullopt;
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(readFile(file));
    } catch (const nlohmann::json::exception& e) {
        throw InputError(file.string() + ": not JSON (" + e.what() + ")");
    }
    return poolSnapshotFromJson(j, file.string());
}

std::vector<PoolWorkerStatus> workersFromMeasurements(const Session& s)
{
    std::map<std::string, PoolWorkerStatus> byId;
    std::map<std::string, std::int64_t> lastLostMs;
    for (const auto& [id, e] : s.evaluations) {
        if (e.measuredOn.worker.empty())
            continue;
        PoolWorkerStatus& w = byId[e.measuredOn.worker];
        w.id = e.measuredOn.worker;
        w.state = "recorded";
        w.transport = w.id.rfind("ssh:", 0) == 0 ? "ssh" : w.id.rfind("slurm:", 0) == 0 ? "slurm" : "local";
        w.gpu = e.measuredOn.gpu;
        w.uuid = e.measuredOn.uuid;
        const auto lost = std::find_if(e.reasons.begin(), e.reasons.end(),
            [](const VerdictReason& r) { return r.rule == "worker.lost" || r.rule == "worker.crashed"; });
        if (lost == e.reasons.end()) {
            ++w.evaluations;
        } else {
            ++w.lost;
            if (e.finishedMs >= lastLostMs[w.id]) {
                lastLostMs[w.id] = e.finishedMs;
                w.lastError = lost->message;
            }
        }
    }
    std::vector<PoolWorkerStatus> out;
    for (auto& [id, w] : byId)
        out.push_back(std::move(w));
    return out;
}

} // namespace kl
