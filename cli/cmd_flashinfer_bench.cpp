// FlashInfer-Bench's trace format on the command line: `kloop problems import` (a Definition and its Workloads
// as a problem) and `kloop export --format flashinfer-bench` (a candidate as their Solution and Trace records).
#include "cli/flashinfer_bench_export.h"
#include "core/catalogue.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "kernels/export/flashinfer_bench.h"

#include <iostream>

namespace kl::cli {
namespace {

    int runImport(const Args& a)
    {
        if (a.positionals().size() != 1)
            throw UsageError("expected one Definition file (DEFINITION.json)");
        flashinfer_bench::ImportOptions o;
        o.definitionFile = a.positionals()[0];
        if (const auto w = a.option("workloads"))
            o.workloadsFile = *w;
        if (const auto r = a.option("reference"))
            o.referenceFile = *r;
        o.intoDir = a.optionOr("into", ".");
        try {
            const auto r = flashinfer_bench::importDefinition(o);
            if (a.has("json")) {
                std::cout << Json {
                    { "folder", r.folder.string() }, { "problem", r.problem.name },
                    { "reference_from", r.referenceFrom }, { "workloads", r.workloads },
                    { "tuning_shapes", r.problem.tuningShapes.size() }, { "axes", r.axisToDim }
                }.dump(2) << "\n";
                return kExitOk;
            }
            std::cout << "imported definition " << r.problem.name << " into " << r.folder.string() << "\n"
                      << "  kernels: " << r.referenceFrom << "\n  axes:";
            for (const auto& [axis, dim] : r.axisToDim)
                std::cout << " " << axis << (axis == dim ? "" : "->" + dim);
            std::cout << "\n  " << r.workloads << " workloads -> " << r.problem.tuningShapes.size()
                      << " tuning shapes\nnext: kloop run --problem " << r.folder.string() << "\n";
            return kExitOk;
        } catch (const InputError& e) {
            std::cerr << "kloop problems import: " << e.what() << "\n";
            return kExitUsage;
        }
    }

    const CommandRegistration regImport { { "problems import",
        "import a FlashInfer-Bench Definition and its Workloads as a problem",
        "kloop problems import DEFINITION.json [--workloads FILE.jsonl] [--into DIR] [--reference FILE.cu] [--json]\n"
        "Writes DIR/NAME (DIR: the current folder) with problem.json: the definition's const axes become constants,\n"
        "each var axis a dim spanning its workloads' values; the distinct workloads become the tuning shapes (weight:\n"
        "how many workloads have that shape) and the two corners of the range the verification shapes.\n"
        "--workloads: their workload traces (TraceSet workloads/OP/NAME.jsonl lines) or bare Workload lines; absent,\n"
        "the file at that place next to the definition's TraceSet folder.\n"
        "The harness needs a CUDA reference: --reference FILE.cu, else the catalogue problem the definition matches:\n"
        "its inputs and its outputs, in order, pair one to one with the definition's (scalars aside) with the same\n"
        "dtype and rank, each extent naming a dim, so that axes and dims pair one to one; every workload must be a\n"
        "valid shape of it (the catalogue problem named like the op_type is tried first). Its kernels, tolerances and\n"
        "scalars come along, under its own names. The definition's Python reference is kept as reference.py.\n"
        "Schema: flashinfer-bench 0.1.2. Bad input exits 2 naming the file and field.",
        { "json" }, { "workloads", "into", "reference" }, &runImport } };

} // namespace

int runFlashInferBenchExport(const Session& s, const Problem& problem, const Args& a)
{
    flashinfer_bench::ExportOptions o;
    o.outDir = *a.option("out");
    o.candidateId = a.optionOr("candidate", "");
    o.overwrite = a.has("overwrite");
    o.minSpeedup = a.real("min-speedup", 1.0, 0, 1e6);
    const auto r = flashinfer_bench::exportSolution(s, problem, o);
    if (a.has("json")) {
        std::cout << Json {
            { "candidate", r.candidateId }, { "solution", r.solutionName },
            { "solution_file", r.solutionFile.string() }, { "traces_file", r.tracesFile.string() },
            { "definition_file", r.definitionFile.string() }, { "traces", r.traces }
        }.dump(2) << "\n";
        return kExitOk;
    }
    std::cout << "exported candidate " << r.candidateId << " of session " << s.id << " as FlashInfer-Bench solution "
              << r.solutionName << "\n  " << r.solutionFile.string() << "\n  " << r.tracesFile.string() << " ("
              << r.traces << " traces)\n";
    if (!r.definitionFile.empty())
        std::cout << "  " << r.definitionFile.string() << "\n";
    return kExitOk;
}

} // namespace kl::cli
