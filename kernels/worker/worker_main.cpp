// kloop-worker: owns the CUDA context and answers JSON-lines requests on stdin/stdout (kernels/HARNESS.md).
// Anything a library prints goes to stderr: stdout carries only protocol lines.
#include "core/errors.h"
#include "core/json_io.h"
#include "kernels/worker/cuda_check.h"
#include "kernels/worker/engine.h"
#include "kernels/worker/profile_op.h"
#include "kernels/worker_protocol.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <unistd.h>

namespace {

using kl::wire::Json;
FILE* g_protocol = nullptr;

void send(const Json& j)
{
    const std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    std::fwrite(line.data(), 1, line.size(), g_protocol);
    std::fflush(g_protocol);
}

kl::worker::CandidateModuleSpec candidateSpec(const Json& j)
{
    kl::worker::CandidateModuleSpec c;
    c.key = j.value("key", "");
    c.source = j.at("source").get<std::string>();
    if (j.contains("params"))
        c.params = kl::wire::paramValues(j.at("params"));
    if (j.contains("cubin_b64"))
        c.cubin = kl::wire::base64Decode(j.at("cubin_b64").get<std::string>());
    if (j.contains("lowered"))
        c.lowered = j.at("lowered").get<std::map<std::string, std::string>>();
    if (j.contains("abi"))
        c.abi = kl::wire::kernelAbi(j.at("abi"));
    return c;
}

const kl::worker::LoadedProblem& problemOf(kl::worker::Engine& engine, const Json& req)
{
    const std::string name = req.at("problem").get<std::string>();
    const auto* lp = engine.problem(name);
    if (!lp)
        throw kl::InputError("problem '" + name + "' is not loaded (send load_problem first)");
    return *lp;
}

Json handle(kl::worker::Engine& engine, const Json& req, bool* stop)
{
    const std::string op = req.at("op").get<std::string>();
    Json res = { { "id", req.value("id", 0) }, { "ok", true } };
    if (op == "hello") {
        res["protocol"] = kl::wire::kProtocolVersion;
        res["device"] = kl::wire::toJson(engine.device());
        res["pid"] = static_cast<long>(::getpid());
        res["cupti"] = kl::worker::CuptiKernelLog::instance().available();
        res["sample"] = kl::wire::toJson(engine.sample());
    } else if (op == "sample") {
        res["sample"] = kl::wire::toJson(engine.sample());
    } else if (op == "load_problem") {
        const kl::Problem p = kl::problemFromJson(req.at("problem_json"), "load_problem.problem_json");
        const auto& lp = engine.loadProblem(
            p, req.at("reference_source").get<std::string>(), req.at("baseline_source").get<std::string>());
        res["problem"] = lp.problem.name;
        res["baseline_kind"] = lp.baselineKind;
        res["reference_compile"] = kl::wire::toJson(lp.referenceCompile);
        res["baseline_compile"] = kl::wire::toJson(lp.baselineCompile);
        // Each output's tolerance as judged, and what it was derived from (kernels/HARNESS.md, "Measured tolerance").
        res["tolerances"] = Json::object();
        for (const auto& [name, t] : lp.tolerances)
            res["tolerances"][name] = kl::wire::toJson(kl::wire::OutputToleranceWire {
                name, kl::dtypeName(t.dtype), t.stated, t.measuredRelL2, t.measuredMaxAbs, t.tolerance });
    } else if (op == "compile") {
        kl::CompileReport report;
        std::string key;
        auto spec = candidateSpec(req.at("candidate"));
        auto plan = engine.candidatePlan(spec, &report, &key);
        res["report"] = kl::wire::toJson(report);
        res["key"] = key; // later requests may send {key, source, params} without the CUBIN
    } else if (op == "verify" || op == "time" || op == "trace" || op == "profile") {
        const auto& lp = problemOf(engine, req);
        kl::CompileReport report;
        auto plan = engine.candidatePlan(candidateSpec(req.at("candidate")), &report);
        res["compile"] = kl::wire::toJson(report);
        if (!plan)
            return res;
        if (op == "verify") {
            kl::worker::VerifyOptions o;
            for (const auto& s : req.at("shapes")) {
                o.shapes.push_back(kl::wire::shape(s));
                o.heldOut.push_back(s.value("held_out", false));
            }
            o.seed = req.value("seed", std::uint64_t { 1 });
            o.cupti = req.value("cupti", true);
            o.graphCheck = req.value("graph_check", true);
            const auto v = engine.verify(lp, *plan, o);
            auto& shapes = res["shapes"] = Json::array();
            for (const auto& s : v.shapes)
                shapes.push_back(kl::wire::toJson(s));
            auto& reasons = res["reasons"] = Json::array();
            for (const auto& r : v.reasons)
                reasons.push_back(kl::wire::toJson(r));
            res["kernel_records"] = v.kernelRecords;
            res["cupti_checked"] = v.cuptiChecked;
        } else if (op == "time") {
            kl::worker::TimeOptions o;
            for (const auto& s : req.at("shapes"))
                o.shapes.push_back(kl::wire::shape(s));
            o.withBaseline = req.value("baseline", true);
            o.maxSecondsPerShape = req.value("max_seconds_per_shape", 2.0);
            o.targetRelHalfWidth = req.value("target_rel_ci", 0.01);
            o.minSamples = req.value("min_samples", 10);
            o.maxSamples = req.value("max_samples", 4000);
            o.graphMode = req.value("graph_mode", "auto");
            o.recheck = req.value("recheck", true);
            o.graphTiming = req.value("graph_timing", true);
            o.seed = req.value("seed", std::uint64_t { 1 });
            const bool withSamples = req.value("return_samples", false);
            const auto t = engine.time(lp, *plan, o);
            auto& shapes = res["shapes"] = Json::array();
            for (const auto& s : t.shapes) {
                Json j = kl::wire::toJson(s.result);
                j["before"] = kl::wire::toJson(s.before);
                j["after"] = kl::wire::toJson(s.after);
                j["throttled"] = s.throttled;
                j["input_sets"] = s.inputSets;
                j["rotation_bytes"] = s.rotationBytes;
                j["output_sets"] = s.outputSets;
                j["checked_batches"] = s.checkedBatches;
                if (withSamples) {
                    j["candidate_samples_us"] = s.candidateSamplesUs;
                    j["baseline_samples_us"] = s.baselineSamplesUs;
                }
                shapes.push_back(j);
            }
            auto& reasons = res["reasons"] = Json::array();
            for (const auto& r : t.reasons)
                reasons.push_back(kl::wire::toJson(r));
        } else if (op == "profile") {
            kl::worker::ProfileOpOptions po;
            po.sol = req.value("sol", true);
            po.trace = req.value("trace", true);
            po.launches = std::clamp(req.value("launches", 5), 1, 1000);
            kl::ProfileReport pr = kl::worker::profilePlans(engine, lp, *plan, kl::wire::shape(req.at("shape")), po);
            pr.compile = report;
            const Json reportJson = kl::wire::toJson(pr); // named: items() of a temporary would dangle
            for (auto it = reportJson.begin(); it != reportJson.end(); ++it)
                res[it.key()] = it.value();
        } else {
            const auto tr = engine.trace(lp, *plan, kl::wire::shape(req.at("shape")), req.value("launches", 50));
            auto& recs = res["records"] = Json::array();
            for (const auto& r : tr.records)
                recs.push_back(kl::wire::toJson(r));
            res["event_us"] = tr.eventUs;
            res["cupti"] = tr.cuptiAvailable;
        }
    } else if (op == "shutdown") {
        *stop = true;
    } else {
        throw kl::InputError("unknown op '" + op + "'");
    }
    return res;
}

} // namespace

int main()
{
    // Keep the protocol on a private descriptor; route fd 1 to stderr so stray library output cannot corrupt it.
    const int protoFd = ::dup(1);
    g_protocol = ::fdopen(protoFd, "w");
    ::dup2(2, 1);
    if (!g_protocol)
        return 2;

    std::unique_ptr<kl::worker::Engine> engine;
    try {
        engine = std::make_unique<kl::worker::Engine>();
    } catch (const std::exception& e) {
        send({ { "id", 0 }, { "ok", false }, { "fatal", true },
            { "error", std::string("worker start failed: ") + e.what() } });
        return 3;
    }
    send({ { "id", 0 }, { "ok", true }, { "op", "ready" } });
    std::string line;
    bool stop = false;
    while (!stop && std::getline(std::cin, line)) {
        if (line.empty())
            continue;
        Json req;
        try {
            req = Json::parse(line);
        } catch (const std::exception& e) {
            send({ { "id", 0 }, { "ok", false }, { "error", std::string("malformed request: ") + e.what() } });
            continue;
        }
        const auto id = req.value("id", 0);
        try {
            send(handle(*engine, req, &stop));
        } catch (const kl::worker::CudaError& e) {
            if (e.sticky()) {
                // The context is unusable; report and die so the client starts a fresh worker.
                send({ { "id", id }, { "ok", false }, { "fatal", true }, { "crashed", true }, { "error", e.what() } });
                std::_Exit(4);
            }
            send({ { "id", id }, { "ok", false }, { "error", e.what() } });
        } catch (const std::exception& e) {
            send({ { "id", id }, { "ok", false }, { "error", e.what() } });
        }
    }
    engine.reset();
    return 0;
}
