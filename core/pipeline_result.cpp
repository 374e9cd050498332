#include "core/pipeline_result.h"

#include "core/errors.h"
#include "core/json_fields.h"

#include <cstdio>
#include <set>

namespace kl {

using namespace jsonfield;

namespace {

    // What a failed end-to-end check measured, so the engineer sees how far off and in what way.
    std::string checkFigures(const CorrectnessStats& c)
    {
        char buf[96];
        std::snprintf(buf, sizeof buf, "rel_l2 %.3g, max_abs %.3g", c.relL2, c.maxAbs);
        return std::string(buf) + (c.nonFinite ? ", non-finite values" : "")
            + (c.fullCoverage ? "" : ", outputs not fully written");
    }

    std::string pair(double relL2, double maxAbs)
    {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.3g / %.3g", relL2, maxAbs);
        return buf;
    }

    std::string measured(const MeasuredError& e)
    {
        return e.valid ? pair(e.relL2, e.maxAbs) : "not measured";
    }

    void putTiming(Json& j, const char* key, const std::optional<TimingStats>& t)
    {
        if (t)
            j[key] = toJson(*t);
    }

    std::optional<TimingStats> getTiming(const Json& j, const char* key, const std::string& where)
    {
        if (!j.contains(key) || j.at(key).is_null())
            return std::nullopt;
        return timingFromJson(j.at(key), where + "." + key);
    }

    Json stageToJson(const PipelineStageResult& s)
    {
        Json j = { { "stage", s.stage }, { "problem", s.problem }, { "impl", s.impl },
            { "differs_from_baseline", s.differsFromBaseline }, { "shape", toJson(s.shape) },
            { "captured", s.captured }, { "capture_error", s.captureError }, { "share", s.share } };
        putTiming(j, "graph", s.graph);
        putTiming(j, "eager", s.eager);
        putTiming(j, "baseline_graph", s.baselineGraph);
        putTiming(j, "baseline_eager", s.baselineEager);
        if (s.check)
            j["check"] = toJson(*s.check);
        return j;
    }

    PipelineStageResult stageFromJson(const Json& j, const std::string& where)
    {
        PipelineStageResult s;
        s.stage = string(j, "stage", where);
        s.problem = string(j, "problem", where);
        s.impl = string(j, "impl", where);
        s.differsFromBaseline = booleanOr(j, "differs_from_baseline", false, where);
        s.shape = shapeFromJson(require(j, "shape", where), where + ".shape");
        s.captured = booleanOr(j, "captured", true, where);
        s.captureError = stringOr(j, "capture_error", "", where);
        s.share = numberOr(j, "share", 0, where);
        s.graph = getTiming(j, "graph", where);
        s.eager = getTiming(j, "eager", where);
        s.baselineGraph = getTiming(j, "baseline_graph", where);
        s.baselineEager = getTiming(j, "baseline_eager", where);
        if (j.contains("check"))
            s.check = correctnessFromJson(j.at("check"), where + ".check");
        return s;
    }

    Json errorToJson(const MeasuredError& e)
    {
        return { { "rel_l2", e.relL2 }, { "max_abs", e.maxAbs }, { "valid", e.valid } };
    }

    MeasuredError errorFromJson(const Json& j, const char* key, const std::string& where)
    {
        MeasuredError e;
        if (const Json* o = optionalObject(j, key, where)) {
            const std::string w = where + "." + key;
            e.relL2 = numberOr(*o, "rel_l2", 0, w);
            e.maxAbs = numberOr(*o, "max_abs", 0, w);
            e.valid = booleanOr(*o, "valid", false, w);
        }
        return e;
    }

    Json toleranceToJson(const Tolerance& t)
    {
        return { { "rel_l2", t.relL2 }, { "max_abs", t.maxAbs } };
    }

    Tolerance toleranceFromJson(const Json& j, const char* key, const std::string& where)
    {
        const Json& o = require(j, key, where);
        const std::string w = where + "." + key;
        return { number(o, "rel_l2", w), number(o, "max_abs", w) };
    }

    Json budgetToJson(const PipelineOutputBudget& b)
    {
        return { { "output", b.output }, { "floor", toleranceToJson(b.floor) },
            { "fp32_chain", errorToJson(b.fp32Chain) }, { "all_baseline", errorToJson(b.allBaseline) },
            { "tolerance", toleranceToJson(b.tolerance) }, { "pipeline", errorToJson(b.pipeline) } };
    }

    PipelineOutputBudget budgetFromJson(const Json& j, const std::string& where)
    {
        PipelineOutputBudget b;
        b.output = string(j, "output", where);
        b.floor = toleranceFromJson(j, "floor", where);
        b.fp32Chain = errorFromJson(j, "fp32_chain", where);
        b.allBaseline = errorFromJson(j, "all_baseline", where);
        b.tolerance = toleranceFromJson(j, "tolerance", where);
        b.pipeline = errorFromJson(j, "pipeline", where);
        return b;
    }

    std::string us(double v)
    {
        char b[32];
        std::snprintf(b, sizeof b, "%.2f us", v);
        return b;
    }
} // namespace

std::string describeBudget(const PipelineOutputBudget& b)
{
    return b.output + ": rel_l2 / max_abs " + measured(b.pipeline) + (withinBudget(b) ? " within " : " over ")
        + pair(b.tolerance.relL2, b.tolerance.maxAbs) + " (honest: fp32 chain " + measured(b.fp32Chain)
        + ", all-baseline " + measured(b.allBaseline) + "; floor " + pair(b.floor.relL2, b.floor.maxAbs) + ")";
}

bool withinBudget(const PipelineOutputBudget& b)
{
    return b.pipeline.valid && b.pipeline.relL2 <= b.tolerance.relL2 && b.pipeline.maxAbs <= b.tolerance.maxAbs;
}

Json toJson(const PipelineResult& r)
{
    Json shapes = Json::array();
    for (const auto& s : r.shapes) {
        Json stages = Json::array(), checks = Json::array(), budgets = Json::array();
        for (const auto& st : s.stages)
            stages.push_back(stageToJson(st));
        for (const auto& c : s.checks)
            checks.push_back(toJson(c));
        for (const auto& b : s.budgets)
            budgets.push_back(budgetToJson(b));
        Json j = { { "shape", toJson(s.shape) }, { "stages", stages }, { "speedup", s.speedup },
            { "speedup_ci_low", s.speedupCiLow }, { "speedup_ci_high", s.speedupCiHigh },
            { "eager_speedup", s.eagerSpeedup }, { "checks", checks }, { "budgets", budgets }, { "correct", s.correct },
            { "input_sets", s.inputSets }, { "flops", s.flops }, { "bytes", s.bytes }, { "mfu", s.mfu },
            { "mbu", s.mbu } };
        putTiming(j, "graph", s.graph);
        putTiming(j, "eager", s.eager);
        putTiming(j, "baseline_graph", s.baselineGraph);
        putTiming(j, "baseline_eager", s.baselineEager);
        shapes.push_back(std::move(j));
    }
    Json reasons = Json::array();
    for (const auto& x : r.reasons)
        reasons.push_back(toJson(x));
    return { { "pipeline", r.pipeline }, { "device", toJson(r.device) },
        { "peaks",
            { { "flops_per_s", r.peaks.flopsPerSecond }, { "bytes_per_s", r.peaks.bytesPerSecond },
                { "source", r.peaks.source } } },
        { "shapes", shapes }, { "reasons", reasons }, { "accepted", r.accepted } };
}

PipelineResult pipelineResultFromJson(const Json& j, const std::string& where)
{
    PipelineResult r;
    r.pipeline = string(j, "pipeline", where);
    if (j.contains("device"))
        r.device = deviceFromJson(j.at("device"), where + ".device");
    if (const Json* peaks = optionalObject(j, "peaks", where)) {
        r.peaks.flopsPerSecond = numberOr(*peaks, "flops_per_s", 0, where + ".peaks");
        r.peaks.bytesPerSecond = numberOr(*peaks, "bytes_per_s", 0, where + ".peaks");
        r.peaks.source = stringOr(*peaks, "source", "", where + ".peaks");
    }
    int i = 0;
    for (const auto& s : arrayField(j, "shapes", where)) {
        const std::string w = where + ".shapes[" + std::to_string(i++) + "]";
        PipelineShapeResult sr;
        sr.shape = shapeFromJson(require(s, "shape", w), w + ".shape");
        int k = 0;
        for (const auto& st : arrayField(s, "stages", w))
            sr.stages.push_back(stageFromJson(st, w + ".stages[" + std::to_string(k++) + "]"));
        sr.graph = getTiming(s, "graph", w);
        sr.eager = getTiming(s, "eager", w);
        sr.baselineGraph = getTiming(s, "baseline_graph", w);
        sr.baselineEager = getTiming(s, "baseline_eager", w);
        sr.speedup = numberOr(s, "speedup", 0, w);
        sr.speedupCiLow = numberOr(s, "speedup_ci_low", 0, w);
        sr.speedupCiHigh = numberOr(s, "speedup_ci_high", 0, w);
        sr.eagerSpeedup = numberOr(s, "eager_speedup", 0, w);
        if (const Json* checks = optionalArray(s, "checks", w)) {
            k = 0;
            for (const auto& c : *checks)
                sr.checks.push_back(correctnessFromJson(c, w + ".checks[" + std::to_string(k++) + "]"));
        }
        if (const Json* budgets = optionalArray(s, "budgets", w)) {
            k = 0;
            for (const auto& b : *budgets)
                sr.budgets.push_back(budgetFromJson(b, w + ".budgets[" + std::to_string(k++) + "]"));
        }
        sr.correct = booleanOr(s, "correct", false, w);
        sr.inputSets = static_cast<int>(integerOr(s, "input_sets", 0, w, 0, 1 << 20));
        sr.flops = numberOr(s, "flops", 0, w);
        sr.bytes = numberOr(s, "bytes", 0, w);
        sr.mfu = numberOr(s, "mfu", 0, w);
        sr.mbu = numberOr(s, "mbu", 0, w);
        r.shapes.push_back(std::move(sr));
    }
    if (const Json* reasons = optionalArray(j, "reasons", where)) {
        int k = 0;
        for (const auto& x : *reasons)
            r.reasons.push_back(reasonFromJson(x, where + ".reasons[" + std::to_string(k++) + "]"));
    }
    r.accepted = booleanOr(j, "accepted", false, where);
    return r;
}

void judgePipeline(PipelineResult& r)
{
    std::set<std::string> seen; // one reason per rule and stage: the first shape's carries the numbers
    auto add = [&](const std::string& rule, const std::string& who, const std::string& message) {
        if (seen.insert(rule + "\n" + who).second)
            r.reasons.push_back({ rule, message, 0, true });
    };
    for (auto& s : r.shapes) {
        const std::string at = " at " + s.shape.label();
        double sum = 0;
        for (const auto& st : s.stages)
            if (const auto& t = st.graph ? st.graph : st.eager)
                sum += t->medianUs;
        bool stageCaptureFailed = false;
        for (auto& st : s.stages) {
            const auto& t = st.graph ? st.graph : st.eager;
            st.share = t && sum > 0 ? t->medianUs / sum : 0;
            const std::string who = "stage " + st.stage + " (" + st.problem + ", " + st.impl + ")";
            if (!st.captured) {
                stageCaptureFailed = true;
                add("pipeline.graph-capture-failed", st.stage,
                    who + " cannot be captured into a CUDA graph" + at + ": " + st.captureError);
            }
            if (st.check && !st.check->passed)
                add("pipeline.stage-wrong", st.stage,
                    who + " is wrong on the chained reference's inputs" + at + " (check " + st.check->distribution
                        + ")");
            if (st.differsFromBaseline && st.eager && st.baselineEager && st.graph && st.baselineGraph
                && st.eager->ciHighUs < st.baselineEager->ciLowUs && st.graph->medianUs >= st.baselineGraph->medianUs)
                add("pipeline.eager-only-win", st.stage,
                    who + " beats its baseline only with graphs off" + at + ": eager " + us(st.eager->medianUs) + " vs "
                        + us(st.baselineEager->medianUs) + ", graph " + us(st.graph->medianUs) + " vs "
                        + us(st.baselineGraph->medianUs));
        }
        if (!s.graph && !stageCaptureFailed)
            add("pipeline.graph-capture-failed", "", "the pipeline cannot be captured into one CUDA graph" + at);
        if (s.graph && s.eagerSpeedup > 1 && s.speedupCiHigh > 0 && s.speedupCiHigh < 1)
            add("pipeline.eager-only-win", "",
                "the pipeline beats the all-baseline pipeline only with graphs off" + at + ": eager speedup "
                    + std::to_string(s.eagerSpeedup) + ", graph speedup " + std::to_string(s.speedup));
        std::string over;
        for (const auto& b : s.budgets)
            if (!withinBudget(b))
                over += "; " + describeBudget(b);
        for (const auto& c : s.checks)
            if (!c.passed && c.distribution.rfind("timed:", 0) != 0) // the worker names a failed timed re-check
                add("pipeline.end-to-end-wrong", "",
                    "the pipeline's outputs differ from the chained references" + at + " (check " + c.distribution
                        + ": " + checkFigures(c) + over + ")");
        if (s.graph && s.graph->medianUs > 0) {
            const double seconds = s.graph->medianUs * 1e-6;
            s.mfu = r.peaks.flopsPerSecond > 0 ? s.flops / seconds / r.peaks.flopsPerSecond : 0;
            s.mbu = r.peaks.bytesPerSecond > 0 ? s.bytes / seconds / r.peaks.bytesPerSecond : 0;
        }
    }
    bool blocking = false;
    for (const auto& x : r.reasons)
        blocking = blocking || x.blocking;
    bool correct = !r.shapes.empty();
    for (const auto& s : r.shapes)
        correct = correct && s.correct;
    r.accepted = correct && !blocking;
}

} // namespace kl
