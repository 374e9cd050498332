#pragma once
// JSON forms of the domain types. Parsing is strict: a wrong type, a missing field or an
// out-of-range number throws InputError naming the field path ("candidates[3].params.BLOCK").
#include "core/candidate.h"
#include "core/device.h"
#include "core/evaluation.h"
#include "core/problem.h"
#include "core/session.h"

#include <nlohmann/json.hpp>
#include <string>

namespace kl {

using Json = nlohmann::json;

Json toJson(const Candidate& c, bool withSource = true);
Candidate candidateFromJson(const Json& j, const std::string& where);
Json toJson(const Hypothesis& h);
Hypothesis hypothesisFromJson(const Json& j, const std::string& where);
Json toJson(const ReviewDecision& r);
ReviewDecision reviewFromJson(const Json& j, const std::string& where);
Json toJson(const DeviceInfo& d);
DeviceInfo deviceFromJson(const Json& j, const std::string& where);
Json toJson(const DeviceSample& d);
DeviceSample deviceSampleFromJson(const Json& j, const std::string& where);
Json toJson(const Evaluation& e);
Evaluation evaluationFromJson(const Json& j, const std::string& where);
Json toJson(const Shape& s);
Shape shapeFromJson(const Json& j, const std::string& where);
Json toJson(const SessionSettings& s);
SessionSettings settingsFromJson(const Json& j, const std::string& where);
Json toJson(const TimingStats& t);
TimingStats timingFromJson(const Json& j, const std::string& where);
Json toJson(const VerdictReason& r);
VerdictReason reasonFromJson(const Json& j, const std::string& where);
Json toJson(const CorrectnessStats& c);
CorrectnessStats correctnessFromJson(const Json& j, const std::string& where);
Json toJson(const ShapeResult& s);
ShapeResult shapeResultFromJson(const Json& j, const std::string& where);
Json toJson(const CompileReport& r);
CompileReport compileReportFromJson(const Json& j, const std::string& where);

// problem.json; folder is recorded so relative source files resolve.
Problem problemFromJson(const Json& j, const std::string& where);
Json toJson(const Problem& p);
Problem loadProblem(const std::string& folder); // reads folder/problem.json; throws InputError

// Field helpers with clear errors, shared by every parser in the project.
namespace jsonfield {
    const Json& require(const Json& j, const char* key, const std::string& where);
    std::string string(const Json& j, const char* key, const std::string& where);
    std::string stringOr(const Json& j, const char* key, const std::string& fallback, const std::string& where);
    std::int64_t integer(const Json& j, const char* key, const std::string& where, std::int64_t min = INT64_MIN,
        std::int64_t max = INT64_MAX);
    std::int64_t integerOr(const Json& j, const char* key, std::int64_t fallback, const std::string& where,
        std::int64_t min = INT64_MIN, std::int64_t max = INT64_MAX);
    double number(const Json& j, const char* key, const std::string& where);
    double numberOr(const Json& j, const char* key, double fallback, const std::string& where);
    bool booleanOr(const Json& j, const char* key, bool fallback, const std::string& where);
} // namespace jsonfield

} // namespace kl
