// Ingest benchmark: imports one trace file and prints one JSON line with wall and CPU time, events/s and the
// process's peak resident memory. Run one file per process (bench/profiler/run-bench.sh) so peaks don't mix.
#include "profiler/importers.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace {

double cpuSeconds()
{
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

long peakRssKb()
{
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: kl_profiler_ingest_bench <chrome|nsys> FILE\n");
        return 2;
    }
    std::string kind = argv[1];
    std::string path = argv[2];
    long rssBefore = peakRssKb();
    auto w0 = std::chrono::steady_clock::now();
    double c0 = cpuSeconds();
    kl::prof::Trace t = kind == "nsys" ? kl::prof::importNsysSqlite(path) : kl::prof::importChromeJsonFile(path);
    double cpu = cpuSeconds() - c0;
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    long rss = peakRssKb();
    // Records read from the file (what the Python baseline counts): model events plus the flow and metadata
    // records the importer folds into links and names.
    std::printf("{\"tool\":\"kl_profiler\",\"kind\":\"%s\",\"model_events\":%zu,\"links\":%zu,\"wall_s\":%.4f,"
                "\"cpu_s\":%.4f,\"peak_rss_bytes\":%ld,\"rss_before_bytes\":%ld,\"trace_heap_bytes\":%zu}\n",
                kind.c_str(), t.eventCount(), t.linkCount(), wall, cpu, rss * 1024, rssBefore * 1024,
                t.memoryBytes());
    return 0;
}
