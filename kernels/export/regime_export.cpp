#include "kernels/export/regime_export.h"

#include "core/current_best.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/session_store.h"
#include "kernels/export/bundle_gen.h"
#include "kernels/export/c_expr.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace kl::exporter {

using detail::upperOf;

namespace {

    bool holds(const Regime& r, const Shape& s)
    {
        try {
            return r.contains(s);
        } catch (const ExprError&) {
            return false;
        }
    }

    // The C dims struct of a regime's bundle, filled from the top-level one.
    std::string copyDims(const RegimeExportPlan& plan, const std::string& subPrefix, const char* var)
    {
        std::string s = "        " + subPrefix + "_dims " + var + ";\n";
        for (const auto& d : plan.dims)
            s += "        " + std::string(var) + "." + detail::cIdent(d) + " = dims->" + detail::cIdent(d) + ";\n";
        return s;
    }

    const RegimeEntry* firstWinner(const RegimeExportPlan& plan)
    {
        for (const RegimeEntry& e : plan.entries)
            if (e.candidateId)
                return &e;
        return nullptr;
    }

    std::string genHeader(const RegimeExportPlan& plan, const Problem& problem)
    {
        const std::string& P = plan.prefix;
        const std::string U = upperOf(P);
        std::ostringstream o;
        o << "/* " << P << "_regimes.h: the shape-regime dispatcher of the exported " << problem.name
          << " kernels. Plain C, no CUDA.\n *\n";
        for (const RegimeEntry& e : plan.entries) {
            o << " *   regime " << e.regime.name << " (" << detail::commentSafe(e.regime.condition.text()) << "): ";
            if (e.candidateId)
                o << "candidate " << *e.candidateId << " inside " << e.plan.dispatch.candidateRegions.size()
                  << " box(es) where it was measured faster, the fallback elsewhere\n";
            else
                o << "no winner: the fallback\n";
        }
        o << " *   fallback: " << detail::commentSafe(plan.fallbackDescription) << "\n */\n";
        o << "#ifndef " << U << "_REGIMES_H\n#define " << U << "_REGIMES_H\n\n";
        o << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
        o << "typedef struct " << P << "_regimes_dims {\n";
        for (const auto& d : plan.dims)
            o << "    long long " << detail::cIdent(d) << ";\n";
        o << "} " << P << "_regimes_dims;\n\n";
        o << "int " << P << "_regimes_count(void);\n";
        o << "const char* " << P << "_regimes_name(int regime);\n";
        o << "/* The candidate that won the regime; NULL when none did. */\n";
        o << "const char* " << P << "_regimes_winner(int regime);\n";
        o << "/* The regime whose condition holds for dims; -1 when none does. */\n";
        o << "int " << P << "_regimes_of(const " << P << "_regimes_dims* dims);\n";
        o << "/* The regime whose winner runs dims; -1: the fallback (outside every box, or a regime without winner). "
             "*/\n";
        o << "int " << P << "_regimes_select(const " << P << "_regimes_dims* dims);\n\n";
        o << "#ifdef __cplusplus\n}\n#endif\n\n#endif\n";
        return o.str();
    }

    std::string genDispatchC(const RegimeExportPlan& plan)
    {
        const std::string& P = plan.prefix;
        std::ostringstream o;
        o << "/* " << P << "_regimes.c: the regime table. Plain C (also valid C++), no CUDA. */\n";
        o << "#include \"" << P << "_regimes.h\"\n#include \"kl_expr.h\"\n";
        for (const RegimeEntry& e : plan.entries)
            if (e.candidateId)
                o << "#include \"" << e.plan.prefix << "_dispatch.h\"\n";
        o << "\n#include <stddef.h>\n\n";
        o << "static const char* const " << P << "_regime_names[] = {";
        for (std::size_t i = 0; i < plan.entries.size(); ++i)
            o << (i ? ", " : "") << "\"" << plan.entries[i].regime.name << "\"";
        o << "};\nstatic const char* const " << P << "_regime_winners[] = {";
        for (std::size_t i = 0; i < plan.entries.size(); ++i) {
            const auto& id = plan.entries[i].candidateId;
            o << (i ? ", " : "") << (id ? "\"" + detail::cIdent(*id) + "\"" : std::string("NULL"));
        }
        o << "};\n\n";
        const std::size_t n = plan.entries.size();
        o << "int " << P << "_regimes_count(void) { return " << n << "; }\n";
        o << "const char* " << P << "_regimes_name(int regime) { return regime >= 0 && regime < " << n << " ? " << P
          << "_regime_names[regime] : NULL; }\n";
        o << "const char* " << P << "_regimes_winner(int regime) { return regime >= 0 && regime < " << n << " ? " << P
          << "_regime_winners[regime] : NULL; }\n\n";
        o << "int " << P << "_regimes_of(const " << P << "_regimes_dims* dims)\n{\n    if (!dims) return -1;\n";
        const IdentifierMap ids = [&plan](const std::string& name) -> std::string {
            if (std::find(plan.dims.begin(), plan.dims.end(), name) == plan.dims.end())
                throw InputError("regime condition: '" + name + "' is not a dim");
            return "((double)dims->" + detail::cIdent(name) + ")";
        };
        for (std::size_t i = 0; i < n; ++i) {
            const Regime& r = plan.entries[i].regime;
            o << "    if ((" << toCExpression(r.condition.text(), ids, "regime " + r.name) << ") != 0.0) return " << i
              << "; /* " << r.name << ": " << detail::commentSafe(r.condition.text()) << " */\n";
        }
        o << "    return -1;\n}\n\n";
        o << "int " << P << "_regimes_select(const " << P << "_regimes_dims* dims)\n{\n";
        o << "    switch (" << P << "_regimes_of(dims)) {\n";
        for (std::size_t i = 0; i < n; ++i) {
            const RegimeEntry& e = plan.entries[i];
            if (!e.candidateId)
                continue;
            o << "    case " << i << ": {\n" << copyDims(plan, e.plan.prefix, "d");
            o << "        return " << e.plan.prefix << "_select(&d) == " << upperOf(e.plan.prefix)
              << "_IMPL_CANDIDATE ? " << i << " : -1;\n    }\n";
        }
        o << "    default:\n        return -1;\n    }\n}\n";
        return o.str();
    }

    // The run entry point: the regime's bundle (its winner or its fallback), or a winner bundle's fallback for a regime
    // no candidate won. Needs the CUDA runtime headers.
    std::string genRunHeaderAndC(const RegimeExportPlan& plan, const Problem& problem, std::string* c)
    {
        const std::string& P = plan.prefix;
        const std::string U = upperOf(P);
        const RegimeEntry* any = firstWinner(plan);
        std::string params = "const " + P + "_regimes_dims* dims";
        std::string args;
        for (const auto& a : detail::apiParams(problem)) {
            params += ", " + a.cType + " " + a.name;
            args += ", " + a.name;
        }
        params += ", void* workspace, size_t workspace_bytes, cudaStream_t stream";
        args += ", workspace, workspace_bytes, stream";
        std::ostringstream h;
        h << "/* " << P << "_regimes_run.h: runs a shape on the kernel its regime dispatches to (" << P
          << "_regimes.h). */\n";
        h << "#ifndef " << U << "_REGIMES_RUN_H\n#define " << U << "_REGIMES_RUN_H\n\n";
        h << "#include <stddef.h>\n#include <cuda_runtime_api.h>\n\n#include \"" << P << "_regimes.h\"\n\n";
        h << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
        h << "/* Every regime bundle's init (per thread, before the first run or capture); 0 when all succeed. */\n";
        h << "int " << P << "_regimes_init(void);\n";
        h << "/* The workspace the shape's kernel needs; (size_t)-1 when it has no valid size. */\n";
        h << "size_t " << P << "_regimes_workspace_bytes(const " << P << "_regimes_dims* dims);\n";
        h << "/* Returns the bundle's error code (0: launched). */\n";
        h << "int " << P << "_regimes_run(" << params << ");\n\n";
        h << "#ifdef __cplusplus\n}\n#endif\n\n#endif\n";

        std::ostringstream o;
        o << "/* " << P << "_regimes_run.c */\n#include \"" << P << "_regimes_run.h\"\n";
        for (const RegimeEntry& e : plan.entries)
            if (e.candidateId)
                o << "#include \"" << e.plan.prefix << ".h\"\n";
        o << "\nint " << P << "_regimes_init(void)\n{\n    int rc = 0;\n";
        for (const RegimeEntry& e : plan.entries)
            if (e.candidateId)
                o << "    if (rc == 0) rc = " << e.plan.prefix << "_init();\n";
        o << "    return rc;\n}\n\n";
        auto body = [&](const std::string& onWinner, const std::string& onFallback) {
            std::string s = "    switch (" + P + "_regimes_of(dims)) {\n";
            for (std::size_t i = 0; i < plan.entries.size(); ++i) {
                const RegimeEntry& e = plan.entries[i];
                if (!e.candidateId)
                    continue;
                s += "    case " + std::to_string(i) + ": {\n" + copyDims(plan, e.plan.prefix, "d");
                s += "        return " + e.plan.prefix + onWinner + ";\n    }\n";
            }
            s += "    default: {\n" + copyDims(plan, any->plan.prefix, "d");
            s += "        return " + any->plan.prefix + onFallback + ";\n    }\n    }\n";
            return s;
        };
        o << "size_t " << P << "_regimes_workspace_bytes(const " << P << "_regimes_dims* dims)\n{\n"
          << "    if (!dims) return (size_t)-1;\n"
          << body("_workspace_bytes(&d)", "_fallback_workspace_bytes(&d)") << "}\n\n";
        o << "int " << P << "_regimes_run(" << params << ")\n{\n    if (!dims) return 4; /* bad argument */\n"
          << body("_run(&d" + args + ")", "_run_fallback(&d" + args + ")") << "}\n";
        *c = o.str();
        return h.str();
    }

    // Shapes the CPU dispatch test checks: every shape a winner was measured on, the problem's declared shapes and
    // the corners of its validity range.
    std::vector<Shape> probeShapes(const Session& s, const Problem& problem, const RegimeExportPlan& plan)
    {
        std::set<Shape> shapes(problem.tuningShapes.begin(), problem.tuningShapes.end());
        shapes.insert(problem.verifyShapes.begin(), problem.verifyShapes.end());
        for (const RegimeEntry& e : plan.entries)
            if (e.candidateId)
                for (const ShapeResult& r : s.evaluations.at(*e.candidateId).shapes)
                    shapes.insert(problem.withConstants(r.shape));
        for (std::size_t mask = 0; mask < (std::size_t(1) << std::min<std::size_t>(problem.dims.size(), 10)); ++mask) {
            Shape c;
            for (std::size_t d = 0; d < problem.dims.size(); ++d) {
                const DimSpec& ds = problem.dims[d];
                const std::int64_t m = std::max<std::int64_t>(1, ds.multipleOf);
                c.dims[ds.name] = (mask >> d) & 1 ? ds.max / m * m : (ds.min + m - 1) / m * m;
            }
            shapes.insert(c);
        }
        std::vector<Shape> out;
        for (const Shape& x : shapes)
            if (problem.shapeIsValid(x))
                out.push_back(x);
        return out;
    }

    std::string genDispatchTest(const RegimeExportPlan& plan, const Problem& problem, const std::vector<Shape>& probes)
    {
        const std::string& P = plan.prefix;
        std::ostringstream o;
        o << "/* The regime dispatcher answers what KernelLoop computed for each shape (regime index: that regime's "
             "winner; -1: the fallback). */\n";
        o << "#include \"" << P << "_regimes.h\"\n\n#include <stdio.h>\n\n";
        o << "typedef struct probe {\n    " << P
          << "_regimes_dims dims;\n    int regime;\n    int expected;\n} probe;\n\n";
        o << "static const probe probes[] = {\n";
        for (const Shape& s : probes) {
            o << "    {{";
            for (std::size_t d = 0; d < plan.dims.size(); ++d)
                o << (d ? ", " : "") << s.dims.at(plan.dims[d]) << "LL";
            int regime = -1;
            for (std::size_t i = 0; i < plan.entries.size() && regime < 0; ++i) // the first that holds, as _regimes_of
                if (holds(plan.entries[i].regime, s))
                    regime = static_cast<int>(i);
            o << "}, " << regime << ", " << plan.select(problem, s) << "}, /* " << s.label() << " */\n";
        }
        o << "};\n\n";
        o << "int main(void)\n{\n    int failures = 0;\n    size_t i;\n";
        o << "    for (i = 0; i < sizeof probes / sizeof probes[0]; ++i) {\n";
        o << "        const int regime = " << P << "_regimes_of(&probes[i].dims);\n";
        o << "        const int got = " << P << "_regimes_select(&probes[i].dims);\n";
        o << "        if (regime != probes[i].regime || got != probes[i].expected) {\n";
        o << "            printf(\"probe %u: regime %d (want %d), kernel %d (want %d)\\n\", (unsigned)i, regime, "
             "probes[i].regime, got, probes[i].expected);\n";
        o << "            ++failures;\n        }\n    }\n";
        o << "    printf(\"regime dispatch: %u shapes, %d wrong\\n\", (unsigned)(sizeof probes / sizeof probes[0]), "
             "failures);\n";
        o << "    return failures ? 1 : 0;\n}\n";
        return o.str();
    }

    std::string genCMake(const RegimeExportPlan& plan, const std::string& cudaArch)
    {
        const std::string& P = plan.prefix;
        std::ostringstream o;
        o << "# The shape-regime dispatcher (lib" << P
          << "_regimes) over one bundle per regime winner, and its CPU "
             "dispatch test:\n#   cmake -S . -B build && cmake --build build && ctest --test-dir build "
             "--output-on-failure\n";
        o << "cmake_minimum_required(VERSION 3.24)\n"
          << detail::cudaArchCMake(cudaArch) << "project(" << P << "_regimes LANGUAGES C CXX CUDA)\n\n";
        o << "find_package(CUDAToolkit REQUIRED)\nenable_testing()\n";
        std::string libs, dispatchSources;
        for (const RegimeEntry& e : plan.entries)
            if (e.candidateId) {
                o << "add_subdirectory(" << e.regime.name << ")\n";
                libs += " " + e.plan.prefix;
                dispatchSources += " " + e.regime.name + "/src/" + e.plan.prefix + "_dispatch.c";
            }
        std::string includes = "include src";
        for (const RegimeEntry& e : plan.entries)
            if (e.candidateId)
                includes += " " + e.regime.name + "/include";
        o << "\nadd_library(" << P << "_regimes src/" << P << "_regimes.c src/" << P << "_regimes_run.c)\n";
        o << "set_target_properties(" << P << "_regimes PROPERTIES POSITION_INDEPENDENT_CODE ON)\n";
        o << "target_include_directories(" << P << "_regimes PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include PRIVATE "
          << "${CMAKE_CURRENT_SOURCE_DIR}/src)\n";
        o << "target_link_libraries(" << P << "_regimes PUBLIC" << libs << " CUDA::cudart)\n\n";
        o << "add_executable(" << P << "_regimes_dispatch_test test/regimes_dispatch_test.c src/" << P << "_regimes.c"
          << dispatchSources << ")\n";
        o << "target_include_directories(" << P << "_regimes_dispatch_test PRIVATE " << includes << ")\n";
        o << "if(UNIX)\n  target_link_libraries(" << P << "_regimes_dispatch_test PRIVATE m)\nendif()\n";
        o << "add_test(NAME regimes_dispatch COMMAND " << P << "_regimes_dispatch_test)\n";
        return o.str();
    }

} // namespace

int RegimeExportPlan::select(const Problem& problem, const Shape& s) const
{
    for (std::size_t i = 0; i < entries.size(); ++i) {
        const RegimeEntry& e = entries[i];
        if (!holds(e.regime, s))
            continue;
        if (!e.candidateId || !e.plan.dispatch.inCandidateRegion(s))
            return -1;
        return problem.shapeIsValid(s) && e.spec && e.spec->satisfies(e.params, s.bindings()) ? static_cast<int>(i)
                                                                                              : -1;
    }
    return -1;
}

RegimeExportPlan planRegimeExport(const Session& s, const Problem& problem, double minSpeedup)
{
    if (problem.regimes.empty())
        throw InputError("problem '" + problem.name
            + "' declares no regimes (problem.json \"regimes\"): export one candidate with --candidate");
    RegimeExportPlan plan;
    plan.prefix = bundlePrefix(problem);
    for (const DimSpec& d : problem.dims)
        plan.dims.push_back(d.name);
    const std::vector<RegimeWinner> winners = regimeWinners(s);
    for (const Regime& r : problem.regimes) {
        RegimeEntry e;
        e.regime = r;
        for (const RegimeWinner& w : winners)
            if (w.regime == r.name && w.winner)
                e.candidateId = *w.winner;
        if (e.candidateId) {
            e.plan = planExport(s, problem, *e.candidateId, minSpeedup, &r);
            e.plan.prefix = plan.prefix + "_" + r.name;
            for (const ExportRefusal& x : e.plan.refusals)
                plan.refusals.push_back({ x.code, "regime " + r.name + ": " + x.message });
            for (const std::string& w : e.plan.warnings)
                plan.warnings.push_back("regime " + r.name + ": " + w);
            plan.fallbackDescription = e.plan.fallbackDescription;
            const Candidate& c = s.tree.at(*e.candidateId);
            e.spec = parseKernelSpec(c.source);
            e.params = c.params;
        } else {
            plan.warnings.push_back("regime " + r.name + " has no winner: its shapes go to the fallback");
        }
        plan.entries.push_back(std::move(e));
    }
    if (!firstWinner(plan))
        throw InputError("session " + s.id
            + " has no regime winner (no candidate was accepted for a regime): export one candidate with --candidate");
    return plan;
}

std::map<std::string, std::string> generateRegimeExport(
    const Session& s, const Problem& problem, const RegimeExportPlan& plan, const ExportOptions& options)
{
    const std::string& P = plan.prefix;
    std::map<std::string, std::string> files;
    Json manifest;
    manifest["kind"] = "regime-dispatcher";
    manifest["problem"] = problem.name;
    manifest["session"] = s.id;
    manifest["fallback"] = plan.fallbackDescription;
    manifest["warnings"] = plan.warnings;
    manifest["refusals"] = refusalsJson(plan.refusals);
    manifest["regimes"] = Json::array();
    for (const RegimeEntry& e : plan.entries) {
        Json j { { "name", e.regime.name }, { "condition", e.regime.condition.text() },
            { "candidate", e.candidateId ? Json(*e.candidateId) : Json() } };
        if (e.candidateId) {
            j["bundle"] = e.regime.name + "/";
            j["candidate_regions"] = Json::array();
            for (const auto& reg : e.plan.dispatch.candidateRegions)
                j["candidate_regions"].push_back(reg.label(e.plan.dispatch.dims));
            for (auto& [path, content] : generateBundleFor(s, problem, e.plan, !e.plan.refusals.empty(), options))
                files[e.regime.name + "/" + path] = std::move(content);
        }
        manifest["regimes"].push_back(std::move(j));
    }
    files["include/" + P + "_regimes.h"] = genHeader(plan, problem);
    files["src/" + P + "_regimes.c"] = genDispatchC(plan);
    files["src/kl_expr.h"] = "#ifndef KL_EXPR_H\n#define KL_EXPR_H\n" + expressionRuntimeC() + "#endif\n";
    std::string runC;
    files["include/" + P + "_regimes_run.h"] = genRunHeaderAndC(plan, problem, &runC);
    files["src/" + P + "_regimes_run.c"] = runC;
    files["test/regimes_dispatch_test.c"] = genDispatchTest(plan, problem, probeShapes(s, problem, plan));
    std::vector<std::string> archWarnings; // each winner's bundle records the same warning in its manifest
    files["CMakeLists.txt"] = genCMake(plan, bundleCudaArch(s.device, archWarnings));
    Json hashes = Json::object();
    for (const auto& [path, content] : files)
        hashes[path] = sha256Hex(content);
    manifest["files"] = hashes;
    files["manifest.json"] = manifest.dump(2) + "\n";
    return files;
}

RegimeExportResult exportRegimes(const Session& s, const Problem& problem, const ExportOptions& options)
{
    RegimeExportResult result;
    result.plan = planRegimeExport(s, problem, options.minSpeedup);
    refuseUnlessForced("the regime winners of session " + s.id, result.plan.refusals, options.force,
        "each bundle's manifest.json and headers");
    result.forced = !result.plan.refusals.empty();
    const auto files = generateRegimeExport(s, problem, result.plan, options);
    result.outDir = writeExport(files, problem, options);
    for (const auto& [path, content] : files)
        result.files.push_back(path);
    return result;
}

} // namespace kl::exporter
