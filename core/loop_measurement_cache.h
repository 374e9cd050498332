#pragma once
// The loop's view of the tuning database: measurements keyed by what determines them, so a configuration
// is never measured twice, within a session or across sessions. agent/tuning_db implements it.
#include "core/candidate.h"
#include "core/device.h"
#include "core/evaluation.h"
#include "core/problem.h"

#include <optional>
#include <string>
#include <vector>

namespace kl {

struct MeasurementKey {
    std::string problem;
    std::string sourceHash; // sha256 of the candidate source (parameters not baked in)
    ParamValues params;
    std::vector<Shape> shapes; // tuning then verification shapes, weights excluded
    std::string device; // name and architecture
    std::string driver;
    std::string cuda; // driver API, runtime and NVRTC versions
    std::string protocol; // a non-default measurement protocol (e.g. "quick"); empty: the default

    std::string canonical() const; // stable JSON text
    std::string digest() const; // sha256 of canonical()
    std::string shapesDigest() const; // groups the records of one (source, shapes, device, versions) space
};

MeasurementKey measurementKeyFor(
    const Candidate& c, const Problem& p, const DeviceInfo& d, const std::string& protocol = {});

class MeasurementCache {
public:
    virtual ~MeasurementCache() = default;
    // A previous measurement (the evaluator's own output, before the loop's decision), or nullopt.
    virtual std::optional<Evaluation> find(const MeasurementKey& key) = 0;
    // Records the evaluator's output. Thread-safe; durable before it returns.
    virtual void record(const MeasurementKey& key, const Evaluation& e) = 0;
};

} // namespace kl
