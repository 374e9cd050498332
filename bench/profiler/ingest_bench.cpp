// Ingest benchmark: imports one trace file and prints one JSON line with wall and CPU time, events/s and the
// process's peak resident memory. Run one file per process (bench/profiler/run-bench.sh) so peaks don't mix.
#include "profiler/importers.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <sys/resource.h>

namespace {

double cpuSeconds()
{
    timespec ts {};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

long peakRssKb()
{
    rusage ru {};
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
    // Timeline queries on the busiest row: a 2000-pixel-wide level-of-detail redraw at random zoom levels,
    // from the whole trace down to 1/10000 of it (what a zooming timeline asks for each frame).
    uint32_t busiest = 0;
    size_t most = 0;
    for (uint32_t r = 0; r < t.rows().size(); ++r) {
        size_t n = 0;
        for (const auto& l : t.rows()[r].lanes)
            n += l.size();
        if (n > most) {
            most = n;
            busiest = r;
        }
    }
    std::mt19937_64 rng(7);
    const int queries = 2000;
    size_t items = 0;
    auto q0 = std::chrono::steady_clock::now();
    for (int q = 0; q < queries; ++q) {
        double zoom = std::pow(10.0, -4.0 * std::uniform_real_distribution<double>(0, 1)(rng));
        int64_t span = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(t.endNs()) * zoom));
        int64_t t0 = std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(0, t.endNs() - span))(rng);
        for (uint32_t lane = 0; lane < t.rows()[busiest].lanes.size(); ++lane)
            items += t.drawItems(busiest, lane, t0, t0 + span, std::max<int64_t>(1, span / 2000)).size();
    }
    double queryUs = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - q0).count() / queries;
    // Records read from the file (what the Python baseline counts): model events plus the flow and metadata
    // records the importer folds into links and names.
    std::printf("{\"tool\":\"kl_profiler\",\"kind\":\"%s\",\"model_events\":%zu,\"links\":%zu,\"wall_s\":%.4f,"
                "\"cpu_s\":%.4f,\"peak_rss_bytes\":%ld,\"rss_before_bytes\":%ld,\"trace_heap_bytes\":%zu,"
                "\"lod_query_row_events\":%zu,\"lod_query_us\":%.2f,\"lod_items_per_query\":%.1f}\n",
        kind.c_str(), t.eventCount(), t.linkCount(), wall, cpu, rss * 1024, rssBefore * 1024, t.memoryBytes(), most,
        queryUs, static_cast<double>(items) / queries);
    return 0;
}
