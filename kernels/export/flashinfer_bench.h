#pragma once
// FlashInfer-Bench's trace format (the schema of the flashinfer-bench wheel kSchemaVersion, flashinfer_bench/data):
// a Definition and its Workloads become a problem folder with tuning shapes, and a candidate's measurements become
// their Solution and Trace records, laid out as their TraceSet folders (definitions/, solutions/, traces/).
#include "core/problem.h"
#include "core/session.h"

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kl::flashinfer_bench {

inline constexpr const char* kSchemaVersion = "0.1.2"; // pinned in scripts/flashinfer-bench-venv
// Written next to problem.json by an import: the definition as given, the axis and tensor names it maps to, and
// the workloads, so that an export writes their names and workload uuids back.
inline constexpr const char* kImportRecordFile = "flashinfer_bench.json";

struct ImportOptions {
    std::filesystem::path definitionFile;
    // Empty: the TraceSet neighbour of the definition (definitions/OP/NAME.json -> workloads/OP/NAME.jsonl).
    std::optional<std::filesystem::path> workloadsFile;
    std::filesystem::path intoDir; // the problem folder becomes intoDir/NAME
    // A CUDA reference kernel for a definition no catalogue problem matches.
    std::optional<std::filesystem::path> referenceFile;
    // Problem folders a definition may match; empty: every problem in the search path.
    std::vector<std::filesystem::path> catalogue;
};

struct ImportResult {
    std::filesystem::path folder;
    Problem problem;
    std::string referenceFrom; // "catalogue problem rmsnorm" or the --reference path
    std::size_t workloads = 0;
    std::map<std::string, std::string> axisToDim; // definition axis -> problem dim
};

// Reads the definition and its workloads, matches the definition against the catalogue (unless referenceFile is
// given) and writes the problem folder: problem.json, the CUDA sources, the definition's Python reference as
// reference.py and kImportRecordFile. A catalogue problem matches when its input tensors and its output tensors,
// each in declaration order, pair one to one with the definition's (scalars aside) with the same dtype and rank,
// and their extents name the problem's dims so that every dim gets exactly one axis and every axis one dim; every
// workload must then be a valid shape of that problem. Throws InputError naming the file and field.
ImportResult importDefinition(const ImportOptions& options);

struct ExportOptions {
    std::string candidateId; // empty: the accepted candidate with the best objective
    std::filesystem::path outDir; // a TraceSet folder: new, or one that earlier exports wrote to
    bool overwrite = false; // replace this candidate's Solution and Trace files
    double minSpeedup = 1.0;
};

struct ExportResult {
    std::string candidateId;
    std::string solutionName;
    std::filesystem::path solutionFile;
    std::filesystem::path tracesFile;
    std::filesystem::path definitionFile; // empty when the problem was not imported from a definition
    std::size_t traces = 0;
};

// Writes the candidate as a Solution and one Trace per timed shape. Refuses (exporter::ExportRefused) what the
// bundle export refuses; throws InputError for an unknown candidate, existing files without overwrite, or a source
// that would carry a secret or a local path.
ExportResult exportSolution(const Session& session, const Problem& problem, const ExportOptions& options);

} // namespace kl::flashinfer_bench
