// kloop tuning-db list|export|import: the tuning database and Kernel Tuner cache files.
#include "agent/tuning_db/tuning_database.h"
#include "cli/command.h"
#include "core/catalogue.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/loop_device_limits.h"
#include "core/session_store.h"

#include <filesystem>
#include <iostream>

namespace fs = std::filesystem;

namespace kl::cli {
namespace {

    fs::path dbPath(const Args& a)
    {
        return a.option("db") ? fs::path(*a.option("db")) : defaultTuningDatabasePath();
    }

    int runList(const Args& a)
    {
        auto db = TuningDatabase::open(dbPath(a));
        Json out = Json::array();
        for (const TuningSpace& s : db->spaces()) {
            Json shapes = Json::array();
            for (const Shape& sh : s.shapes)
                shapes.push_back(sh.label());
            out.push_back({ { "space", s.shapesDigest.substr(0, 16) }, { "problem", s.problem }, { "device", s.device },
                { "source", s.sourceHash.substr(0, 12) }, { "records", s.records }, { "shapes", shapes } });
        }
        if (a.has("json")) {
            std::cout << out.dump(2) << "\n";
            return kExitOk;
        }
        std::cout << db->file().string() << ": " << db->size() << " records\n";
        for (const auto& s : out)
            std::cout << "  " << s["space"].get<std::string>() << "  " << s["problem"].get<std::string>() << "  "
                      << s["records"].get<std::size_t>() << " configurations  " << s["device"].get<std::string>()
                      << "  " << s["shapes"].dump() << "\n";
        return kExitOk;
    }

    // A space by the digest prefix `list` prints, or by the problem name printed next to it when that names one.
    std::string resolveSpace(const TuningDatabase& db, const std::string& prefix)
    {
        std::string found;
        for (const TuningSpace& s : db.spaces())
            if (s.shapesDigest.rfind(prefix, 0) == 0 || s.problem == prefix) {
                if (!found.empty())
                    throw InputError(
                        "space '" + prefix + "' is ambiguous: give more of the digest kloop tuning-db list prints");
                found = s.shapesDigest;
            }
        if (found.empty())
            throw InputError("no recorded space starts with '" + prefix + "' (kloop tuning-db list shows them)");
        return found;
    }

    int runExport(const Args& a)
    {
        if (!a.option("space") || !a.option("out")) {
            std::cerr << "usage: kloop tuning-db export --space PREFIX --out FILE.json [--db FILE] [--kernel NAME]\n";
            return kExitUsage;
        }
        auto db = TuningDatabase::open(dbPath(a));
        const Json kt = db->exportKernelTunerCache(resolveSpace(*db, *a.option("space")), a.optionOr("kernel", ""));
        writeFileAtomic(*a.option("out"), kt.dump(1) + "\n");
        std::cout << "wrote " << kt["cache"].size() << " configurations to " << *a.option("out") << "\n";
        return kExitOk;
    }

    int runImport(const Args& a)
    {
        if (a.positionals().size() != 1 || !a.option("problem") || !a.option("device")) {
            std::cerr << "usage: kloop tuning-db import CACHE.json --problem NAME|DIR --device NAME [--source FILE.cu] "
                         "[--db FILE]\n";
            return kExitUsage;
        }
        const fs::path file = a.positionals()[0];
        const Json doc = parseKernelTunerCache(readFile(file), file.string());
        const fs::path folder = findProblemFolder(*a.option("problem"));
        const Problem problem = loadProblem(folder.string());
        const fs::path source = a.option("source") ? fs::path(*a.option("source")) : folder / problem.templateFile;
        MeasurementKey key;
        key.problem = problem.name;
        const std::string sourceText = readFile(source);
        const KernelSpec spec = parseKernelSpec(sourceText, problem);
        key.sourceHash = sha256Hex(sourceText);
        key.shapes = shapesOf(problem);
        key.device = *a.option("device");
        key.driver = a.optionOr("driver", "");
        key.cuda = a.optionOr("cuda", "");
        auto db = TuningDatabase::open(dbPath(a));
        std::vector<std::string> warnings;
        const std::size_t added
            = db->importKernelTunerCache(doc, key, "kernel-tuner:" + file.filename().string(), &warnings, &spec);
        for (const auto& w : warnings)
            std::cerr << "warning: " << w << "\n";
        std::cout << "imported " << added << " configurations into " << db->file().string()
                  << " (replay and export use them; the loop still measures them itself: no baseline speedups)\n";
        return kExitOk;
    }

    int guarded(int (*f)(const Args&), const Args& a)
    {
        try {
            return f(a);
        } catch (const InputError& e) {
            std::cerr << "kloop tuning-db: " << e.what() << "\n";
            return kExitFailure;
        }
    }

    const CommandRegistration regList { { "tuning-db list", "list the recorded spaces of the tuning database",
        "kloop tuning-db list [--db FILE] [--json]\nDefault database: $KL_TUNING_DB or "
        "~/.cache/kernelloop/tuning.jsonl.",
        { "json" }, { "db" }, [](const Args& a) { return guarded(&runList, a); } } };
    const CommandRegistration regExport { { "tuning-db export", "write one recorded space as a Kernel Tuner cache file",
        "kloop tuning-db export --space PREFIX --out FILE.json [--db FILE] [--kernel NAME]\n\"time\" is the "
        "workload-weighted sum of the per-shape median times in ms; failures are Kernel Tuner's *FailedConfig strings.",
        {}, { "space", "out", "db", "kernel" }, [](const Args& a) { return guarded(&runExport, a); } } };
    const CommandRegistration regImport { { "tuning-db import",
        "import a Kernel Tuner cache file (a killed run's file without closing braces is fine)",
        "kloop tuning-db import CACHE.json --problem NAME|DIR --device NAME [--source FILE.cu] [--driver V] "
        "[--cuda V] [--db FILE]\nRecords every configuration under the problem's shapes and the source's hash (the "
        "problem's template by default).",
        {}, { "problem", "device", "source", "driver", "cuda", "db" },
        [](const Args& a) { return guarded(&runImport, a); } } };

} // namespace
} // namespace kl::cli
