#include "agent/tuning_db/tuning_database.h"

#include "core/errors.h"
#include "core/json_io.h"
#include "core/loop_objective.h"
#include "core/session_store.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <limits>
#include <set>
#include <sstream>
#include <unistd.h>

namespace kl {

namespace fs = std::filesystem;

namespace {

    nlohmann::json keyToJson(const MeasurementKey& k)
    {
        nlohmann::json shapes = nlohmann::json::array();
        for (const Shape& s : k.shapes)
            shapes.push_back(toJson(s));
        nlohmann::json params = nlohmann::json::object();
        for (const auto& [n, v] : k.params)
            params[n] = v;
        nlohmann::json j = { { "problem", k.problem }, { "source", k.sourceHash }, { "params", params },
            { "shapes", shapes }, { "device", k.device }, { "driver", k.driver }, { "cuda", k.cuda } };
        if (!k.protocol.empty())
            j["protocol"] = k.protocol;
        return j;
    }

    MeasurementKey keyFromJson(const nlohmann::json& j, const std::string& where)
    {
        using namespace jsonfield;
        MeasurementKey k;
        k.problem = string(j, "problem", where);
        k.sourceHash = string(j, "source", where);
        const auto& params = require(j, "params", where);
        if (!params.is_object())
            throw InputError(where + ".params: expected an object");
        for (const auto& [n, v] : params.items()) {
            if (!v.is_number_integer())
                throw InputError(where + ".params." + n + ": expected an integer");
            k.params[n] = v.get<std::int64_t>();
        }
        const auto& shapes = require(j, "shapes", where);
        if (!shapes.is_array())
            throw InputError(where + ".shapes: expected an array");
        for (std::size_t i = 0; i < shapes.size(); ++i)
            k.shapes.push_back(shapeFromJson(shapes[i], where + ".shapes[" + std::to_string(i) + "]"));
        k.device = string(j, "device", where);
        k.driver = stringOr(j, "driver", "", where);
        k.cuda = stringOr(j, "cuda", "", where);
        k.protocol = stringOr(j, "protocol", "", where);
        return k;
    }

    double weightedTimeUs(const Evaluation& e)
    {
        double sum = 0;
        bool any = false;
        for (const ShapeResult& s : e.shapes)
            if (!s.heldOut && s.timing) {
                sum += std::max(s.shape.weight, 0.0) * s.timing->medianUs;
                any = true;
            }
        return any ? sum : std::numeric_limits<double>::infinity();
    }

    bool failed(const Evaluation& e)
    {
        if (!ranToCompletion(e.verdict) || e.verdict == Verdict::Rejected)
            return true;
        if (!e.correctEverywhere())
            return true;
        for (const VerdictReason& r : e.reasons)
            if (r.blocking)
                return true;
        return false;
    }

    std::string isoNow()
    {
        return isoUtc(static_cast<std::int64_t>(std::time(nullptr)) * 1000);
    }

} // namespace

double recordCost(const Evaluation& e)
{
    if (failed(e))
        return std::numeric_limits<double>::infinity();
    if (auto v = computeObjective(e, "weighted-geomean-speedup"))
        return 1.0 / v->value;
    return weightedTimeUs(e);
}

fs::path defaultTuningDatabasePath()
{
    if (const char* p = std::getenv("KL_TUNING_DB"); p && *p)
        return p;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
        return fs::path(x) / "kernelloop" / "tuning.jsonl";
    if (const char* h = std::getenv("HOME"); h && *h)
        return fs::path(h) / ".cache" / "kernelloop" / "tuning.jsonl";
    return fs::path(".kernelloop-tuning.jsonl");
}

TuningDatabase::TuningDatabase(fs::path file)
    : m_file(std::move(file))
{
}

TuningDatabase::~TuningDatabase()
{
    if (m_fd >= 0)
        ::close(m_fd);
}

std::unique_ptr<TuningDatabase> TuningDatabase::open(const fs::path& file, std::vector<std::string>* warnings)
{
    std::unique_ptr<TuningDatabase> db(new TuningDatabase(file));
    std::error_code ec;
    if (file.has_parent_path())
        fs::create_directories(file.parent_path(), ec);
    if (fs::exists(file)) {
        const std::string text = readFile(file, std::size_t(4) << 30);
        std::size_t pos = 0;
        int line = 0;
        while (pos < text.size()) {
            std::size_t end = text.find('\n', pos);
            const bool last = end == std::string::npos;
            if (last)
                end = text.size();
            const std::string l = text.substr(pos, end - pos);
            pos = end + 1;
            ++line;
            if (l.empty())
                continue;
            const std::string where = file.string() + " line " + std::to_string(line);
            try {
                const auto j = nlohmann::json::parse(l);
                TuningRecord r;
                r.key = keyFromJson(jsonfield::require(j, "key", where), where + ".key");
                r.digest = r.key.digest();
                r.evaluation = evaluationFromJson(jsonfield::require(j, "evaluation", where), where + ".evaluation");
                r.recordedMs = jsonfield::integerOr(j, "recordedMs", 0, where);
                r.origin = jsonfield::stringOr(j, "origin", "measured", where);
                const auto it = db->m_byDigest.find(r.digest);
                if (it != db->m_byDigest.end())
                    db->m_records[it->second] = std::move(r);
                else {
                    db->m_byDigest[r.digest] = db->m_records.size();
                    db->m_records.push_back(std::move(r));
                }
            } catch (const nlohmann::json::exception& ex) {
                if (last) {
                    if (warnings)
                        warnings->push_back(where + ": torn last line ignored");
                    continue;
                }
                throw InputError(where + ": not JSON: " + ex.what());
            }
        }
        // A torn last line would glue onto the next append: cut it off (its record is lost either way).
        if (!text.empty() && text.back() != '\n') {
            const std::size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
            std::error_code rec;
            fs::resize_file(file, keep, rec);
            if (rec)
                throw InputError("cannot cut the torn last line of " + file.string() + ": " + rec.message());
        }
    }
    db->m_fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (db->m_fd < 0)
        throw InputError("cannot open the tuning database " + file.string() + ": " + std::strerror(errno));
    return db;
}

std::size_t TuningDatabase::size() const
{
    std::lock_guard lock(m_mutex);
    return m_records.size();
}

std::optional<Evaluation> TuningDatabase::find(const MeasurementKey& key)
{
    std::lock_guard lock(m_mutex);
    const auto it = m_byDigest.find(key.digest());
    if (it == m_byDigest.end() || m_records[it->second].origin != "measured")
        return std::nullopt;
    return m_records[it->second].evaluation;
}

std::optional<TuningRecord> TuningDatabase::lookup(const MeasurementKey& key) const
{
    std::lock_guard lock(m_mutex);
    const auto it = m_byDigest.find(key.digest());
    if (it == m_byDigest.end())
        return std::nullopt;
    return m_records[it->second];
}

void TuningDatabase::appendLocked(const TuningRecord& r)
{
    const nlohmann::json j = { { "v", 1 }, { "key", keyToJson(r.key) }, { "recordedMs", r.recordedMs },
        { "origin", r.origin }, { "evaluation", toJson(r.evaluation) } };
    const std::string line = j.dump() + "\n";
    std::size_t done = 0;
    while (done < line.size()) {
        const ssize_t n = ::write(m_fd, line.data() + done, line.size() - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            throw InputError("cannot write the tuning database " + m_file.string() + ": " + std::strerror(errno));
        }
        done += static_cast<std::size_t>(n);
    }
    if (::fsync(m_fd) != 0)
        throw InputError("cannot fsync the tuning database " + m_file.string() + ": " + std::strerror(errno));
    const auto it = m_byDigest.find(r.digest);
    if (it != m_byDigest.end())
        m_records[it->second] = r;
    else {
        m_byDigest[r.digest] = m_records.size();
        m_records.push_back(r);
    }
}

void TuningDatabase::record(const MeasurementKey& key, const Evaluation& e)
{
    TuningRecord r;
    r.key = key;
    r.digest = key.digest();
    r.evaluation = e;
    r.recordedMs = nowMs();
    r.origin = "measured";
    std::lock_guard lock(m_mutex);
    appendLocked(r);
}

std::vector<TuningSpace> TuningDatabase::spaces() const
{
    std::lock_guard lock(m_mutex);
    std::map<std::string, TuningSpace> by;
    std::vector<std::string> order;
    for (const TuningRecord& r : m_records) {
        const std::string d = r.key.shapesDigest();
        auto [it, fresh] = by.try_emplace(d);
        if (fresh) {
            order.push_back(d);
            it->second
                = TuningSpace { d, r.key.problem, r.key.sourceHash, r.key.device, r.key.shapes, r.key.protocol, 0 };
        }
        ++it->second.records;
    }
    std::vector<TuningSpace> out;
    for (const auto& d : order)
        out.push_back(by[d]);
    return out;
}

std::vector<TuningRecord> TuningDatabase::recordsOf(const std::string& shapesDigest) const
{
    std::lock_guard lock(m_mutex);
    std::vector<TuningRecord> out;
    for (const TuningRecord& r : m_records)
        if (r.key.shapesDigest() == shapesDigest)
            out.push_back(r);
    return out;
}

nlohmann::json TuningDatabase::exportKernelTunerCache(
    const std::string& shapesDigest, const std::string& kernelName) const
{
    const std::vector<TuningRecord> records = recordsOf(shapesDigest);
    if (records.empty())
        throw InputError("the tuning database has no records for space " + shapesDigest);
    std::vector<std::string> keys;
    std::map<std::string, std::set<std::int64_t>> values;
    for (const TuningRecord& r : records)
        for (const auto& [n, v] : r.key.params) {
            if (!values.count(n))
                keys.push_back(n);
            values[n].insert(v);
        }
    std::sort(keys.begin(), keys.end());
    const MeasurementKey& k0 = records.front().key;
    nlohmann::json problemSize = nlohmann::json::array();
    for (const Shape& s : k0.shapes) {
        nlohmann::json dims = nlohmann::json::object();
        for (const auto& [n, v] : s.dims)
            dims[n] = v;
        problemSize.push_back(dims);
    }
    nlohmann::json tuneParams = nlohmann::json::object();
    for (const auto& n : keys)
        tuneParams[n] = std::vector<std::int64_t>(values[n].begin(), values[n].end());
    nlohmann::json cache = nlohmann::json::object();
    for (const TuningRecord& r : records) {
        std::string id;
        nlohmann::json entry = nlohmann::json::object();
        for (const auto& n : keys) {
            const auto it = r.key.params.find(n);
            const std::int64_t v = it == r.key.params.end() ? 0 : it->second;
            id += (id.empty() ? "" : ",") + std::to_string(v);
            entry[n] = v;
        }
        const Evaluation& e = r.evaluation;
        if (e.verdict == Verdict::CompileFailed)
            entry["time"] = "CompilationFailedConfig";
        else if (e.verdict == Verdict::Crashed || e.verdict == Verdict::TimedOut)
            entry["time"] = "RuntimeFailedConfig";
        else if (failed(e) || !std::isfinite(weightedTimeUs(e)))
            entry["time"] = "InvalidConfig";
        else {
            entry["time"] = weightedTimeUs(e) / 1000.0;
            nlohmann::json times = nlohmann::json::array();
            for (const ShapeResult& s : e.shapes)
                if (!s.heldOut && s.timing)
                    times.push_back(s.timing->medianUs / 1000.0);
            entry["times"] = times;
            if (auto obj = computeObjective(e, "weighted-geomean-speedup"))
                entry["speedup"] = obj->value;
        }
        entry["compile_time"] = e.compile.compileMs;
        entry["verification_time"] = 0;
        entry["benchmark_time"] = static_cast<double>(e.finishedMs - e.startedMs);
        entry["strategy_time"] = 0;
        entry["framework_time"] = 0;
        entry["timestamp"] = isoNow();
        cache[id] = entry;
    }
    return { { "device_name", k0.device }, { "kernel_name", kernelName.empty() ? k0.problem : kernelName },
        { "problem_size", problemSize }, { "tune_params_keys", keys }, { "tune_params", tuneParams },
        { "objective", "time" }, { "cache", cache },
        { "kernelloop",
            { { "source", k0.sourceHash }, { "driver", k0.driver }, { "cuda", k0.cuda },
                { "time", "workload-weighted sum of per-shape median times, ms" } } } };
}

std::size_t TuningDatabase::importKernelTunerCache(const nlohmann::json& doc, const MeasurementKey& keyTemplate,
    const std::string& origin, std::vector<std::string>* warnings, const KernelSpec* spec)
{
    const std::string where = origin;
    if (!doc.is_object() || !doc.contains("cache") || !doc["cache"].is_object())
        throw InputError(where + ": not a Kernel Tuner cache file (no \"cache\" object)");
    std::vector<std::string> keys;
    if (doc.contains("tune_params_keys") && doc["tune_params_keys"].is_array())
        for (const auto& k : doc["tune_params_keys"]) {
            if (!k.is_string())
                throw InputError(where + ".tune_params_keys: expected strings");
            keys.push_back(k.get<std::string>());
        }
    std::vector<TuningRecord> records;
    std::lock_guard lock(m_mutex);
    for (const auto& [id, entry] : doc["cache"].items()) {
        const std::string w = where + ".cache[\"" + abbreviate(id) + "\"]";
        if (!entry.is_object())
            throw InputError(w + ": expected an object");
        MeasurementKey key = keyTemplate;
        key.params.clear();
        std::vector<std::string> names = keys;
        if (names.empty() && spec) {
            for (const auto& ps : spec->params)
                if (entry.contains(ps.name))
                    names.push_back(ps.name);
        } else if (names.empty()) {
            for (const auto& [n, v] : entry.items())
                if (v.is_number_integer())
                    names.push_back(n);
        }
        for (const auto& n : names) {
            if (!entry.contains(n) || !entry[n].is_number()) {
                if (warnings)
                    warnings->push_back(w + ": parameter " + n + " missing or not a number; entry skipped");
                key.params.clear();
                break;
            }
            const double v = entry[n].get<double>();
            if (v != std::floor(v)) {
                if (warnings)
                    warnings->push_back(w + ": parameter " + n + " is not an integer; entry skipped");
                key.params.clear();
                break;
            }
            key.params[n] = static_cast<std::int64_t>(v);
        }
        if (key.params.empty())
            continue;
        if (spec) {
            try {
                spec->requireValidParams(key.params);
            } catch (const InputError& e) {
                throw InputError(w + ": " + e.what());
            }
        }
        TuningRecord r;
        r.key = key;
        r.digest = key.digest();
        if (m_byDigest.count(r.digest))
            continue;
        r.origin = origin;
        r.recordedMs = nowMs();
        Evaluation& e = r.evaluation;
        static const nlohmann::json kNoTime;
        // A reference, not a copy: copying a hostile, deeply nested value recurses once per level.
        const nlohmann::json& t = entry.contains("time") ? entry["time"] : kNoTime;
        if (t.is_number()) {
            if (spec && !(t.get<double>() >= 0 && std::isfinite(t.get<double>())))
                throw InputError(w + ".time: " + t.dump() + " is not a time in ms");
            e.verdict = Verdict::Correct;
            ShapeResult s;
            s.shape = keyTemplate.shapes.empty() ? Shape {} : keyTemplate.shapes.front();
            s.shape.weight = 1.0;
            s.correct = true;
            TimingStats ts;
            ts.medianUs = t.get<double>() * 1000.0;
            ts.p10Us = ts.p90Us = ts.ciLowUs = ts.ciHighUs = ts.medianUs;
            ts.samples
                = entry.contains("times") && entry["times"].is_array() ? static_cast<int>(entry["times"].size()) : 1;
            s.timing = ts;
            e.shapes.push_back(s);
        } else if (t.is_string()) {
            const std::string f = t.get<std::string>();
            if (spec && f != "CompilationFailedConfig" && f != "RuntimeFailedConfig" && f != "InvalidConfig")
                throw InputError(w + ".time: '" + abbreviate(f)
                    + "' is neither a number of ms nor a Kernel Tuner "
                      "failure (CompilationFailedConfig, RuntimeFailedConfig, InvalidConfig)");
            e.verdict = f == "CompilationFailedConfig" ? Verdict::CompileFailed
                : f == "RuntimeFailedConfig"           ? Verdict::Crashed
                                                       : Verdict::Rejected;
            e.reasons.push_back({ "import.kernel-tuner", "Kernel Tuner recorded " + f, 0, true });
        } else {
            if (spec)
                throw InputError(w + ".time: expected a number of ms or a Kernel Tuner failure, got "
                    + (t.is_null() ? std::string("none") : t.type_name()));
            if (warnings)
                warnings->push_back(w + ": no time; entry skipped");
            continue;
        }
        if (entry.contains("compile_time") && entry["compile_time"].is_number())
            e.compile.compileMs = entry["compile_time"].get<double>();
        e.compile.ok = e.verdict != Verdict::CompileFailed;
        records.push_back(std::move(r));
    }
    std::size_t added = 0;
    for (const auto& r : records)
        if (!m_byDigest.count(r.digest)) { // a cache may list one configuration twice
            appendLocked(r);
            ++added;
        }
    return added;
}

nlohmann::json parseKernelTunerCache(const std::string& text, const std::string& where)
{
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
    }
    // An aborted Kernel Tuner run leaves "...}," or "...}" without the closing braces of cache and file.
    std::string t = text;
    while (!t.empty() && (std::isspace(static_cast<unsigned char>(t.back())) || t.back() == ','))
        t.pop_back();
    for (const char* tail : { "}}", "}", "}}}" }) {
        try {
            return nlohmann::json::parse(t + tail);
        } catch (const nlohmann::json::exception&) {
        }
    }
    throw InputError(where + ": not a Kernel Tuner cache file (malformed JSON)");
}

} // namespace kl
