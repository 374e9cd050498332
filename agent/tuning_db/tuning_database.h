#pragma once
// The tuning database: every measured configuration, keyed by (problem, source hash, parameters, shapes,
// device, driver and CUDA versions), in one append-only JSON-lines file shared by all sessions. The loop
// consults it before evaluating (kl::MeasurementCache), so nothing is measured twice; the search-efficiency
// benchmark replays strategies over its recorded sweeps. Kernel Tuner cache files import and export.
#include "core/kernel_spec.h"
#include "core/loop_measurement_cache.h"

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kl {

struct TuningRecord {
    MeasurementKey key;
    std::string digest; // key.digest()
    Evaluation evaluation; // the evaluator's output, before any loop decision
    std::int64_t recordedMs = 0;
    std::string origin; // "measured" or "kernel-tuner:<file>"
};

// One recorded space: the records that share everything but the parameters.
struct TuningSpace {
    std::string shapesDigest;
    std::string problem;
    std::string sourceHash;
    std::string device;
    std::vector<Shape> shapes;
    std::string protocol; // MeasurementKey::protocol: empty for the full protocol, "screen:5x1" for screens
    std::size_t records = 0;
};

// Lower is better: 1 / weighted-geomean speedup when the record has speedups, else the workload-weighted
// sum of median times in microseconds; +infinity for a failed or incorrect configuration.
double recordCost(const Evaluation& e);

class TuningDatabase final : public MeasurementCache {
public:
    // Opens or creates the file (and its directory). A torn last line (a killed writer) is skipped with a
    // warning; any other malformed line throws InputError naming the line.
    static std::unique_ptr<TuningDatabase> open(
        const std::filesystem::path& file, std::vector<std::string>* warnings = nullptr);
    ~TuningDatabase() override;

    // Measured records only: an imported Kernel Tuner time has no baseline speedups to decide with.
    std::optional<Evaluation> find(const MeasurementKey& key) override;
    void record(const MeasurementKey& key, const Evaluation& e) override;

    std::size_t size() const;
    std::vector<TuningSpace> spaces() const;
    std::vector<TuningRecord> recordsOf(const std::string& shapesDigest) const;
    std::optional<TuningRecord> lookup(const MeasurementKey& key) const; // any origin
    const std::filesystem::path& file() const { return m_file; }

    // Kernel Tuner cache-file JSON for one recorded space ("time" in ms per configuration).
    nlohmann::json exportKernelTunerCache(const std::string& shapesDigest, const std::string& kernelName = {}) const;
    // Records every entry of a Kernel Tuner cache file under keyTemplate (everything but the parameters).
    // Returns the number of new records; entries already present are skipped. With spec (the annotations of the
    // source the cache measured), an entry whose parameters spec does not declare or allow, or whose time is
    // neither a number of ms nor a Kernel Tuner failure marker, is an InputError naming it, and nothing is recorded.
    std::size_t importKernelTunerCache(const nlohmann::json& cache, const MeasurementKey& keyTemplate,
        const std::string& origin, std::vector<std::string>* warnings = nullptr, const KernelSpec* spec = nullptr);

private:
    explicit TuningDatabase(std::filesystem::path file);
    void appendLocked(const TuningRecord& r);

    std::filesystem::path m_file;
    mutable std::mutex m_mutex;
    std::vector<TuningRecord> m_records;
    std::map<std::string, std::size_t> m_byDigest;
    int m_fd = -1;
};

// Parses a Kernel Tuner cache file. Kernel Tuner appends entries while it runs, so a file from an aborted
// run lacks its closing braces; those are restored. Throws InputError naming the file when it is not one.
nlohmann::json parseKernelTunerCache(const std::string& text, const std::string& where);

// The default database file: $KL_TUNING_DB, else $XDG_CACHE_HOME/kernelloop/tuning.jsonl, else
// ~/.cache/kernelloop/tuning.jsonl.
std::filesystem::path defaultTuningDatabasePath();

} // namespace kl
