// kloop pipeline validate|show|run: pipelines as data (kernels/pipelines/<name>/pipeline.json, issue #19).
#include "cli/command.h"
#include "core/catalogue.h"
#include "core/errors.h"
#include "core/pipeline.h"
#include "core/pipeline_result.h"
#include "core/session_store.h"
#include "kernels/export/pipeline_export.h"
#include "kernels/harness_plan.h"
#include "kl_build_features.h"

#if KL_FEATURE_CUDA
#include "kernels/pipeline_runner.h"
#endif

#include <cstdio>
#include <iostream>

namespace kl::cli {
namespace {

    Pipeline load(const std::string& nameOrDir)
    {
        return loadPipeline(findPipelineFolder(nameOrDir));
    }

    int validate(const Args& a)
    {
        std::vector<std::string> names = a.positionals();
        if (names.empty())
            names = listPipelines();
        int bad = 0;
        for (const auto& n : names) {
            try {
                const Pipeline p = load(n);
                std::cout << p.name << ": ok (" << p.stages.size() << " stages, "
                          << p.space.tuningShapes.size() + p.space.verifyShapes.size() << " shapes checked)\n";
            } catch (const InputError& e) {
                std::cerr << e.what() << "\n";
                ++bad;
            }
        }
        return bad ? kExitFailure : kExitOk;
    }

    int show(const Args& a)
    {
        if (a.positionals().size() != 1)
            throw UsageError("kloop pipeline show NAME|DIR");
        const Pipeline p = load(a.positionals()[0]);
        if (a.has("json")) {
            std::cout << toJson(p).dump(2) << "\n";
            return kExitOk;
        }
        std::cout << p.name << ": " << p.description << "\n";
        std::cout << "inputs: ";
        for (std::size_t i = 0; i < p.inputs.size(); ++i)
            std::cout << (i ? ", " : "") << p.inputs[i];
        std::cout << "\n";
        const Shape& s = p.space.tuningShapes.front();
        std::cout << "stages at " << s.label() << ":\n";
        for (const auto& st : p.stages) {
            std::cout << "  " << st.name << "  " << st.problemName << " " << st.shapeAt(s).label() << "  runs "
                      << st.impl.describe() << "  reads";
            for (const auto& [tensor, source] : st.inputs)
                std::cout << " " << tensor << "<-" << source.text();
            std::cout << "\n";
        }
        std::cout << "outputs:";
        for (const auto& o : p.outputs)
            std::cout << " " << o.name << "<-" << o.source.text();
        std::cout << "\nend to end, each output within " << kMeasuredToleranceFactor
                  << "x the honest error measured at each shape on the check's inputs (the fp32 references chained, "
                     "the all-baseline pipeline), never below its producing problem's measured tolerance:";
        for (const auto& o : p.outputs) {
            const PipelineStage* producer = p.stage(o.source.stage);
            const Tolerance t = producer->problem.toleranceFor(p.sourceSpec(o.source)->dtype);
            std::printf("\n  %s: %s's, at most the stated %.3g / %.3g", o.name.c_str(), producer->problemName.c_str(),
                t.relL2, t.maxAbs);
        }
        std::cout << "\nflops " << p.space.flops.text() << "\nbytes " << p.space.bytes.text() << "\n";
        if (p.peaks.flopsPerSecond > 0)
            std::printf("peaks %.0f TFLOP/s, %.2f TB/s (%s)\n", p.peaks.flopsPerSecond / 1e12,
                p.peaks.bytesPerSecond / 1e12, p.peaks.source.c_str());
        return kExitOk;
    }

    void printResult(const PipelineResult& r)
    {
        for (const auto& s : r.shapes) {
            std::printf("%s:", s.shape.label().c_str());
            if (s.graph && s.baselineGraph)
                std::printf(" graph %.2f us vs %.2f us all-baseline, %.3fx [%.3f, %.3f]; MFU %.1f%% MBU %.1f%%",
                    s.graph->medianUs, s.baselineGraph->medianUs, s.speedup, s.speedupCiLow, s.speedupCiHigh,
                    100 * s.mfu, 100 * s.mbu);
            if (s.eager)
                std::printf("; eager %.2f us (speedup %.3fx)", s.eager->medianUs, s.eagerSpeedup);
            std::printf("; %s\n", s.correct ? "correct" : "WRONG");
            for (const auto& b : s.budgets)
                std::printf("  end to end %s\n", describeBudget(b).c_str());
            for (const auto& st : s.stages)
                std::printf("  %-10s %-18s %5.1f%%  %8.2f us  %s%s\n", st.stage.c_str(), st.problem.c_str(),
                    100 * st.share, st.graph ? st.graph->medianUs : (st.eager ? st.eager->medianUs : 0.0),
                    st.impl.c_str(), st.captured ? "" : "  (breaks capture)");
        }
        std::printf("%s\n", r.accepted ? "accepted" : "rejected");
        for (const auto& x : r.reasons)
            std::printf("  %s: %s\n", x.rule.c_str(), x.message.c_str());
    }

    int run(const Args& a)
    {
        if (a.positionals().size() != 1)
            throw UsageError("kloop pipeline run NAME|DIR [--shapes JSON] [--seed N] [--max-seconds S] [--out FILE] "
                             "[--json] [--dry-run]");
        const Pipeline p = load(a.positionals()[0]);
#if KL_FEATURE_CUDA
        PipelineRunOptions o;
        if (const auto text = a.option("shapes")) {
            Json j;
            try {
                j = Json::parse(*text);
            } catch (const Json::exception&) {
                throw UsageError("--shapes: expected JSON, e.g. '[{\"T\": 16}]'");
            }
            if (!j.is_array())
                j = Json::array({ j });
            for (std::size_t i = 0; i < j.size(); ++i)
                o.shapes.push_back(
                    p.space.withConstants(shapeFromJson({ { "dims", j[i] } }, "--shapes[" + std::to_string(i) + "]")));
        }
        o.seed = static_cast<std::uint64_t>(a.integer("seed", 1, 0, INT64_MAX));
        o.maxSecondsPerShape = a.real("max-seconds", 2.0, 0.01, 600);
        if (a.has("dry-run")) {
            std::cout << wire::toJson(pipelineRequest(p, o)).dump(2) << "\n";
            return kExitOk;
        }
        WorkerClient client(o.worker);
        const PipelineResult r = runPipelineOnWorker(p, o, client);
        const Json j = toJson(r);
        if (const auto out = a.option("out"))
            writeFileAtomic(*out, j.dump(1) + "\n");
        if (a.has("json"))
            std::cout << j.dump(2) << "\n";
        else
            printResult(r);
        return r.accepted ? kExitOk : kExitFailure;
#else
        (void)p;
        std::cerr << "kloop pipeline run: this build has no CUDA support, so it has no GPU worker\n";
        return kExitFailure;
#endif
    }

    int exportBundle(const Args& a)
    {
        const auto out = a.option("out");
        if (a.positionals().size() != 1 || !out)
            throw UsageError("kloop pipeline export NAME|DIR --out DIR [--stage STAGE=SESSION[:CANDIDATE] ...] "
                             "[--force] [--overwrite] [--min-speedup X] [--json]");
        const Pipeline p = load(a.positionals()[0]);
        std::vector<exporter::PipelineStageSource> stages;
        for (const auto& text : a.options("stage"))
            stages.push_back(exporter::parseStageSource(text));
        exporter::ExportOptions o;
        o.outDir = *out;
        o.force = a.has("force");
        o.overwrite = a.has("overwrite");
        o.minSpeedup = a.real("min-speedup", 1.0, 0, 1e6);
        exporter::PipelineExportResult r;
        try {
            r = exporter::exportPipeline(p, stages, o);
        } catch (const exporter::ExportRefused& e) {
            if (a.has("json")) {
                std::cout << Json { { "refused", true }, { "refusals", exporter::refusalsJson(e.refusals()) } }.dump(2)
                          << "\n";
            }
            throw;
        }
        if (a.has("json")) {
            Json j { { "out", r.outDir.string() }, { "forced", r.forced }, { "files", r.files },
                { "warnings", r.plan.warnings }, { "stages", Json::array() } };
            for (const auto& e : r.plan.stages)
                j["stages"].push_back({ { "name", e.stage }, { "prefix", e.prefix },
                    { "candidate", e.hasCandidate() ? Json(e.plan.candidateId) : Json() },
                    { "session", e.hasCandidate() ? Json(e.session->id) : Json() },
                    { "fallback", e.plan.fallbackDescription }, { "origin", e.origin } });
            std::cout << j.dump(2) << "\n";
            return kExitOk;
        }
        if (r.forced) {
            std::cerr << "WARNING: FORCED EXPORT despite:\n" << exporter::refusalLines(r.plan.refusals);
        }
        std::cout << "exported pipeline " << p.name << " to " << r.outDir.string() << " (" << r.files.size()
                  << " files)\n";
        for (const auto& e : r.plan.stages) {
            std::cout << "  " << e.stage << ": ";
            if (e.hasCandidate())
                std::cout << "candidate " << e.plan.candidateId << " of session " << e.session->id << " ("
                          << e.plan.dispatch.candidateRegions.size()
                          << " box(es) where it was measured faster), fallback elsewhere: ";
            else
                std::cout << "fallback (" << e.origin << "): ";
            std::cout << e.plan.fallbackDescription << "\n";
        }
        for (const auto& w : r.plan.warnings)
            std::cout << "warning: " << w << "\n";
        std::cout << "build and self-test: cmake -S " << r.outDir.string()
                  << " -B build && cmake --build build && ctest --test-dir build\n";
        return kExitOk;
    }

    int guarded(const Args& a, int (*fn)(const Args&), const char* name)
    {
        try {
            return fn(a);
        } catch (const UsageError& e) {
            std::cerr << "kloop pipeline " << name << ": " << e.what() << "\n";
            return kExitUsage;
        } catch (const std::exception& e) {
            std::cerr << "kloop pipeline " << name << ": " << e.what() << "\n";
            return kExitFailure;
        }
    }

    const CommandRegistration validateReg { { "pipeline validate",
        "load and validate pipelines (all in the catalogue when none is named)",
        "kloop pipeline validate [NAME|DIR ...]\n\n"
        "Loads each kernels/pipelines/<name>/pipeline.json (or DIR/pipeline.json) against the problem catalogue and\n"
        "checks its wiring at every tuning and verify shape: stage problems and tensors exist, dtypes and extents\n"
        "agree, inputs come from pipeline inputs or earlier stages, outputs are stage outputs, every stage input is\n"
        "wired and every stage shape is inside its problem's validity range. Errors name the file and the field.",
        {}, {}, [](const Args& a) { return guarded(a, validate, "validate"); } } };

    const CommandRegistration showReg { { "pipeline show", "a pipeline's stages, wiring, formulas and peaks",
        "kloop pipeline show NAME|DIR [--json]", { "json" }, {},
        [](const Args& a) { return guarded(a, show, "show"); } } };

    const CommandRegistration runReg { { "pipeline run",
        "run a pipeline on the GPU worker: one CUDA graph, timed against the all-baseline pipeline",
        "kloop pipeline run NAME|DIR [--shapes JSON] [--seed N] [--max-seconds S] [--out FILE] [--json] [--dry-run]\n\n"
        "Loads every stage problem into the worker, resolves each stage's implementation (a session's accepted\n"
        "candidate, the baseline, the library fallback or the reference), then per shape (default: the tuning\n"
        "shapes; --shapes '[{\"T\": 16}]') verifies the pipeline end to end on fresh inputs against the stages'\n"
        "references chained, eager and replayed from the graph, and each stage alone; judges each pipeline output\n"
        "against 8x the honest error measured on the same inputs (the fp32 references chained, the all-baseline\n"
        "pipeline), never below the producing problem's own tolerance, and prints both; captures the whole pipeline\n"
        "into one CUDA graph and times it interleaved with the all-baseline pipeline, eager and graph, on rotating\n"
        "sets that keep L2 cold; reports each stage's share, MFU/MBU and the verdict. A stage that breaks capture or\n"
        "wins only with graphs off is rejected by name. --out writes the result JSON the workbench's pipeline view\n"
        "opens; exit 1 when rejected. --dry-run prints the worker request instead.",
        { "json", "dry-run" }, { "shapes", "seed", "max-seconds", "out" },
        [](const Args& a) { return guarded(a, run, "run"); } } };

    const CommandRegistration exportReg { { "pipeline export",
        "export a pipeline as one bundle: each stage's kernel, one entry point, a PyTorch op, a self-test",
        "kloop pipeline export NAME|DIR --out DIR [--stage STAGE=SESSION[:CANDIDATE] ...] [--force] [--overwrite]\n"
        "                      [--min-speedup X] [--json]\n\n"
        "Picks each stage's kernel as `kloop pipeline run` does: --stage names a session (and a candidate; default: "
        "its\n"
        "accepted candidate with the best objective), else the stage's impl in pipeline.json (a session's candidate;\n"
        "baseline, library or reference: the fallback). Each stage is written as `kloop export` writes one problem,\n"
        "under DIR/<stage>/ with the prefix kl_<pipeline>_<stage>: a candidate's bundle (its dispatcher runs it only\n"
        "where it was measured faster, the fallback elsewhere), or for a stage without one its fallback (cuBLAS or "
        "the\n"
        "problem's reference kernel). include/kl_<pipeline>.h runs the stages in order on the wired tensors, the\n"
        "intermediates carved from one caller-allocated workspace; torch/ has the PyTorch op, test/ the GPU self-test\n"
        "against the all-fallback pipeline; manifest.json names each stage's source. Refuses what `kloop export`\n"
        "refuses (not accepted, flagged, ...) unless --force; on any error nothing is written and DIR is untouched.",
        { "json", "force", "overwrite" }, { "out", "stage", "min-speedup" },
        [](const Args& a) { return guarded(a, exportBundle, "export"); } } };

} // namespace
} // namespace kl::cli
