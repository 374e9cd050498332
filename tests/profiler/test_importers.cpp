#include "core/errors.h"
#include "profiler/chrome_export.h"
#include "profiler/importers.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <zlib.h>

using namespace kl::prof;

namespace {

Trace chrome(const std::string& json)
{
    MemorySource src(json);
    return importChromeJson(src, "test.json");
}

std::string importError(const std::string& json)
{
    try {
        chrome(json);
    } catch (const kl::InputError& e) {
        return e.what();
    }
    return "";
}

const char* kKineto = R"J({"schemaVersion":1,
 "deviceProperties":[{"id":0,"name":"NVIDIA H200","totalGlobalMem":150109978624,"computeMajor":9,"computeMinor":0,"numSms":132}],
 "traceEvents":[
  {"ph":"M","name":"thread_name","pid":1102,"tid":1102,"args":{"name":"python main"}},
  {"ph":"X","cat":"cpu_op","name":"aten::cat","pid":1102,"tid":1102,"ts":1712195495505570.000,"dur":20.5},
  {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1102,"tid":1102,"ts":1712195495505575.123,"dur":4.5,
   "args":{"External id":112,"cbid":211,"correlation":135071}},
  {"ph":"X","cat":"kernel","name":"void at::native::CatArrayBatchedCopy<float>","pid":0,"tid":7,
   "ts":1712195495505583.0,"dur":4.928,
   "args":{"External id":112,"queued":0,"device":0,"context":1,"stream":7,"correlation":135071,
           "registers per thread":30,"shared memory":0,"blocks per SM":5.3,"warps per SM":21.2,
           "grid":[4,106,1],"block":[128,1,1],"est. achieved occupancy %":33}},
  {"ph":"s","cat":"ac2g","id":135071,"pid":1102,"tid":1102,"ts":1712195495505575.123,"name":"ac2g"},
  {"ph":"f","cat":"ac2g","id":135071,"pid":0,"tid":7,"ts":1712195495505583.0,"bp":"e","name":"ac2g"},
  {"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD (Pageable -> Device)","pid":0,"tid":7,"ts":1712195495505600,"dur":10,
   "args":{"device":0,"stream":7,"correlation":135080,"bytes":1048576}},
  {"ph":"X","cat":"user_annotation","name":"forward","pid":1102,"tid":1102,"ts":1712195495505560,"dur":100},
  {"ph":"X","cat":"gpu_user_annotation","name":"forward","pid":0,"tid":7,"ts":1712195495505583,"dur":30,"args":{"device":0,"stream":7}},
  {"ph":"X","cat":"python_function","name":"model.py(12): forward","pid":1102,"tid":1102,"ts":1712195495505561,"dur":90,
   "args":{"Python id":3,"Python parent id":1}}
 ],
 "traceName":"x","displayTimeUnit":"ms"})J";

} // namespace

TEST(ChromeImport, ReadsKinetoKernelLaunchMemcpyAndAnnotations)
{
    Trace t = chrome(kKineto);
    ASSERT_EQ(t.devices().size(), 1u);
    EXPECT_EQ(t.devices()[0].name, "NVIDIA H200");
    EXPECT_EQ(t.devices()[0].smCount, 132);
    size_t kernels = 0, launches = 0, memcpys = 0, ranges = 0, gpuAnn = 0, cpuOps = 0;
    uint32_t kernel = kNone, launch = kNone;
    for (uint32_t i = 0; i < t.eventCount(); ++i) {
        const Event& e = t.event(i);
        switch (e.kind) {
        case EventKind::Kernel:
            ++kernels;
            kernel = i;
            break;
        case EventKind::RuntimeApi:
            ++launches;
            launch = i;
            break;
        case EventKind::Memcpy:
            ++memcpys;
            break;
        case EventKind::NvtxRange:
            ++ranges;
            break;
        case EventKind::GpuAnnotation:
            ++gpuAnn;
            break;
        case EventKind::CpuOp:
            ++cpuOps;
            break;
        default:
            break;
        }
    }
    EXPECT_EQ(kernels, 1u);
    EXPECT_EQ(launches, 1u);
    EXPECT_EQ(memcpys, 1u);
    EXPECT_EQ(ranges, 1u);
    EXPECT_EQ(gpuAnn, 1u);
    EXPECT_EQ(cpuOps, 2u);
    const Event& k = t.event(kernel);
    EXPECT_EQ(t.name(k), "void at::native::CatArrayBatchedCopy<float>");
    EXPECT_EQ(k.duration(), 4928); // 4.928 us, exact
    // ts keeps nanosecond precision on a 1.7e15 us clock: 1712195495505583.0 - 1712195495505560 = 23 us.
    EXPECT_EQ(k.start + t.timeOffsetNs(), 1712195495505583000ll);
    const KernelInfo* ki = t.kernelInfo(k);
    ASSERT_NE(ki, nullptr);
    EXPECT_EQ(ki->grid[0], 4u);
    EXPECT_EQ(ki->grid[1], 106u);
    EXPECT_EQ(ki->block[0], 128u);
    EXPECT_EQ(ki->registersPerThread, 30u);
    EXPECT_FLOAT_EQ(ki->estOccupancyPct, 33.f);
    EXPECT_EQ(t.rows()[k.row].kind, RowKind::GpuStream);
    EXPECT_EQ(t.rows()[k.row].tid, 7);
    EXPECT_EQ(t.launchOf(kernel), launch);
    EXPECT_EQ(t.event(launch).start + t.timeOffsetNs(), 1712195495505575123ll);
    EXPECT_EQ(t.strings().view(t.rows()[t.event(launch).row].name), "python main (1102)");
    for (uint32_t i = 0; i < t.eventCount(); ++i) {
        if (t.event(i).kind == EventKind::Memcpy) {
            const MemOpInfo* m = t.memOpInfo(t.event(i));
            ASSERT_NE(m, nullptr);
            EXPECT_EQ(m->bytes, 1048576u);
            EXPECT_EQ(t.strings().view(m->copyKind), "HtoD");
        }
    }
}

TEST(ChromeImport, FlowEventsLinkLaunchesWithoutCorrelation)
{
    Trace t = chrome(R"({"traceEvents":[
      {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":"host","tid":"main","ts":10,"dur":5},
      {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":20,"dur":3},
      {"ph":"s","cat":"ac2g","id":"x1","pid":"host","tid":"main","ts":12},
      {"ph":"f","cat":"ac2g","id":"x1","pid":0,"tid":7,"ts":20,"bp":"e"}]})");
    ASSERT_EQ(t.linkCount(), 1u);
    for (uint32_t i = 0; i < t.eventCount(); ++i) {
        if (t.event(i).kind == EventKind::Kernel) {
            EXPECT_EQ(t.name(t.event(t.launchOf(i))), "cudaLaunchKernel");
        }
    }
}

TEST(ChromeImport, BeginEndPairsArrayFormAndMissingClosingBracket)
{
    Trace t = chrome(R"([{"ph":"B","name":"outer","pid":1,"tid":2,"ts":1},
      {"ph":"B","name":"inner","pid":1,"tid":2,"ts":2},
      {"ph":"E","pid":1,"tid":2,"ts":3},
      {"ph":"E","pid":1,"tid":2,"ts":10},
      {"ph":"i","name":"mark","pid":1,"tid":2,"ts":4,"s":"t"},)");
    ASSERT_EQ(t.eventCount(), 3u);
    bool sawOuter = false;
    for (const auto& e : t.events()) {
        if (t.name(e) == "outer") {
            sawOuter = true;
            EXPECT_EQ(e.duration(), 9000);
            EXPECT_EQ(e.lane, 0);
        } else if (t.name(e) == "inner") {
            EXPECT_EQ(e.duration(), 1000);
            EXPECT_EQ(e.lane, 1);
        }
    }
    EXPECT_TRUE(sawOuter);
    EXPECT_FALSE(t.meta().warnings.empty()); // the missing ']' is noted
}

TEST(ChromeImport, EscapesAndLongStringsAcrossTheReadWindow)
{
    std::string longName(3u << 20, 'x'); // longer than the 1 MiB window
    std::string json
        = R"({"traceEvents":[{"ph":"X","name":"a\u00e9\ud83d\ude00\n\"q\"","ts":1,"dur":1,"pid":1,"tid":1},)"
          R"({"ph":"X","name":")"
        + longName + R"(","ts":2,"dur":1,"pid":1,"tid":1}]})";
    // Stream it through a small-chunk source so the window logic runs.
    struct Chunky : ByteSource {
        std::string_view s;
        size_t pos = 0;
        size_t read(char* dst, size_t n) override
        {
            size_t k = std::min({ n, s.size() - pos, size_t { 4093 } });
            std::memcpy(dst, s.data() + pos, k);
            pos += k;
            return k;
        }
        uint64_t bytesConsumed() const override { return pos; }
    } src;
    src.s = json;
    Trace t = importChromeJson(src, "chunky");
    ASSERT_EQ(t.eventCount(), 2u);
    EXPECT_EQ(t.name(t.event(0)), "a\xc3\xa9\xf0\x9f\x98\x80\n\"q\"");
    EXPECT_EQ(t.name(t.event(1)).size(), longName.size());
}

TEST(ChromeImport, MalformedInputGivesPositionedErrors)
{
    std::string e = importError("{\"traceEvents\":[\n{\"ph\":\"X\",\"ts\":1,}\n]}");
    EXPECT_NE(e.find("test.json:2:"), std::string::npos) << e;
    e = importError(R"({"traceEvents":[{"ph":"X","ts":1,"dur":2,"pid":1,"tid":1},{"ph":"X","ts":)");
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;
    EXPECT_NE(importError("").find("empty"), std::string::npos);
    EXPECT_NE(importError("hello").find("not a JSON trace"), std::string::npos);
    EXPECT_NE(importError(R"({"other":1})").find("traceEvents"), std::string::npos);
    EXPECT_NE(importError(R"({"traceEvents":[1]})").find("not an object"), std::string::npos);
    EXPECT_NE(importError(R"({"traceEvents":[{"name":"\q"}]})").find("invalid escape"), std::string::npos);
    EXPECT_NE(importError(R"({"traceEvents":[{"ts":"abc"}]})").find("microseconds"), std::string::npos);
    EXPECT_NE(importError(R"({"traceEvents":[]} trailing)").find("after the end"), std::string::npos);
    // Hostile nesting inside args is bounded, not recursive.
    std::string deep = R"({"traceEvents":[{"args":{"x":)" + std::string(100000, '[') + "]}}]}";
    EXPECT_NE(importError(deep).find("nesting deeper"), std::string::npos);
}

TEST(ChromeImport, CancelStopsTheImport)
{
    std::string json = "[";
    for (int i = 0; i < 20000; ++i)
        json += R"({"ph":"X","name":"a","ts":)" + std::to_string(i) + R"(,"dur":1,"pid":1,"tid":1},)";
    json += "]";
    ImportOptions opts;
    opts.cancel.cancel();
    MemorySource src(json);
    EXPECT_THROW(importChromeJson(src, "c", opts), ImportCancelled);
}

TEST(ChromeImport, GzipFilesAndTruncatedGzip)
{
    auto dir = std::filesystem::temp_directory_path() / ("kl-prof-gz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::string path = (dir / "t.json.gz").string();
    gzFile gz = gzopen(path.c_str(), "wb");
    gzwrite(gz, kKineto, static_cast<unsigned>(std::strlen(kKineto)));
    gzclose(gz);
    EXPECT_EQ(detectFormat(path), TraceFormat::ChromeJson);
    Trace t = importTraceFile(path);
    EXPECT_EQ(t.linkCount(), 1u);
    // Cut the compressed file in half: a clear error, not a crash or a partial trace.
    auto size = std::filesystem::file_size(path);
    std::filesystem::resize_file(path, size / 2);
    try {
        importTraceFile(path);
        ADD_FAILURE() << "expected an error";
    } catch (const kl::InputError& e) {
        EXPECT_NE(std::string(e.what()).find("t.json.gz"), std::string::npos) << e.what();
    }
    std::filesystem::remove_all(dir);
}

TEST(ChromeExport, RoundTripKeepsEventsKernelsAndLinks)
{
    Trace a = chrome(kKineto);
    std::string json = toChromeJson(a);
    Trace b = chrome(json);
    ASSERT_EQ(b.eventCount(), a.eventCount());
    EXPECT_EQ(b.linkCount(), a.linkCount());
    EXPECT_EQ(b.timeOffsetNs(), a.timeOffsetNs());
    // Same multiset of (kind, name, start, duration).
    auto sig = [](const Trace& t) {
        std::vector<std::tuple<int, std::string, int64_t, int64_t>> v;
        for (const auto& e : t.events())
            v.emplace_back(static_cast<int>(e.kind), std::string(t.name(e)), e.start, e.duration());
        std::sort(v.begin(), v.end());
        return v;
    };
    EXPECT_EQ(sig(a), sig(b));
}

TEST(KlTraceImport, PairsMarkersMapsSolAndWarnsOnDrops)
{
    std::string text = R"({"kltrace":1,"pid":1,"cupti":130001,"cmd":"./prog"}
{"t":"dev","id":0,"sms":132,"cc":[9,0],"mem":150000000000,"d":0,"n":"NVIDIA H200"}
{"t":"api","s":100,"e":200,"p":1,"th":2,"r":5,"drv":0,"n":"cudaLaunchKernel"}
{"t":"k","s":300,"e":900,"d":0,"q":7,"r":5,"g":[132,1,1],"b":[256,1,1],"reg":32,"ss":0,"ds":1024,"n":"k_copy"}
{"t":"api","s":950,"e":990,"p":1,"th":2,"r":6,"drv":0,"n":"cudaMemcpyAsync"}
{"t":"mc","s":1000,"e":2000,"d":0,"q":7,"r":6,"B":4096,"kind":"HtoD"}
{"t":"ms","s":2100,"e":2200,"d":0,"q":7,"r":7,"B":4096}
{"t":"m","ts":50,"id":1,"f":2,"p":1,"th":2,"n":"step"}
{"t":"m","ts":995,"id":1,"f":4,"p":1,"th":2,"n":""}
{"t":"m","ts":960,"id":2,"f":1,"p":1,"th":2,"n":"mark"}
{"t":"sol","n":"0","i":0,"dur":600,"dram":83.1,"sm":6.0,"occ":97.0,"dramB":4.2e9}
{"t":"drop","i":3}
)";
    MemorySource src(text);
    Trace t = importKlTrace(src, "x.kltrace");
    ASSERT_EQ(t.devices().size(), 1u);
    EXPECT_EQ(t.devices()[0].smCount, 132);
    EXPECT_EQ(t.linkCount(), 2u);
    uint32_t kernel = kNone, range = kNone;
    for (uint32_t i = 0; i < t.eventCount(); ++i) {
        if (t.event(i).kind == EventKind::Kernel)
            kernel = i;
        if (t.event(i).kind == EventKind::NvtxRange)
            range = i;
    }
    ASSERT_NE(kernel, kNone);
    ASSERT_NE(range, kNone);
    EXPECT_EQ(t.name(t.event(range)), "step");
    EXPECT_EQ(t.event(range).duration(), 945);
    EXPECT_EQ(t.kernelInfo(t.event(kernel))->dynamicSharedMemory, 1024u);
    ASSERT_EQ(t.sol().size(), 1u);
    EXPECT_EQ(t.sol()[0].event, kernel);
    EXPECT_DOUBLE_EQ(t.sol()[0].dramThroughputPct, 83.1);
    ASSERT_FALSE(t.meta().warnings.empty());
    EXPECT_NE(t.meta().warnings.back().find("dropped 3"), std::string::npos);

    MemorySource bad(R"({"t":"k"})");
    EXPECT_THROW(importKlTrace(bad, "bad.kltrace"), kl::InputError);
}

// ---------------------------------------------------------------- Nsight Systems SQLite

TEST(NsysImport, SyntheticExportResolvesNamesLinksAndRanges)
{
    std::string path = std::string(KL_SOURCE_DIR) + "/tests/profiler/data/nsys_synthetic.sqlite";
    ASSERT_EQ(detectFormat(path), TraceFormat::NsysSqlite);
    Trace t = importTraceFile(path);
    EXPECT_EQ(t.meta().source, "nsys-sqlite");
    ASSERT_EQ(t.devices().size(), 1u);
    EXPECT_EQ(t.devices()[0].name, "NVIDIA H200");
    size_t kernels = 0, api = 0, ranges = 0, named = 0;
    for (uint32_t i = 0; i < t.eventCount(); ++i) {
        const Event& e = t.event(i);
        if (e.kind == EventKind::Kernel) {
            ++kernels;
            EXPECT_NE(t.launchOf(i), kNone);
            if (!t.name(e).empty())
                ++named;
        }
        api += e.kind == EventKind::RuntimeApi;
        ranges += e.kind == EventKind::NvtxRange;
    }
    EXPECT_GT(kernels, 150u);
    EXPECT_EQ(named, kernels); // every demangledName id resolved through StringIds
    EXPECT_GT(api, kernels - 1);
    EXPECT_GT(ranges, 2u);
    bool threadNamed = false;
    for (const auto& r : t.rows())
        threadNamed |= t.strings().view(r.name) == "python3 (31337)";
    EXPECT_TRUE(threadNamed);
}

TEST(NsysImport, HandBuiltExportWithMarksAndMissingColumns)
{
    auto dir = std::filesystem::temp_directory_path() / ("kl-prof-sq-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::string path = (dir / "x.sqlite").string();
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* sql = R"(
      CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
      INSERT INTO StringIds VALUES (1,'gemm'),(2,'cudaLaunchKernel_v7000'),(3,'phase');
      CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, streamId INT, correlationId INT,
        shortName INT, gridX INT, gridY INT, gridZ INT, blockX INT, blockY INT, blockZ INT);
      INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (5000, 9000, 0, 13, 77, 1, 8, 4, 1, 128, 1, 1);
      CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT, correlationId INT, nameId INT);
      INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1000, 3000, 2533274790395999, 77, 2);
      CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT, textId INT, globalTid INT);
      INSERT INTO NVTX_EVENTS VALUES (500, 4000, 59, NULL, 3, 2533274790395999);
      INSERT INTO NVTX_EVENTS VALUES (600, NULL, 34, 'here', NULL, 2533274790395999);
      INSERT INTO NVTX_EVENTS VALUES (600, NULL, 75, 'domain', NULL, 2533274790395999);
    )";
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    Trace t = importNsysSqlite(path);
    ASSERT_EQ(t.eventCount(), 4u); // kernel, launch, range, mark (domain-create is not an event)
    for (uint32_t i = 0; i < t.eventCount(); ++i) {
        const Event& e = t.event(i);
        if (e.kind == EventKind::Kernel) {
            EXPECT_EQ(t.name(e), "gemm");
            EXPECT_EQ(t.kernelInfo(e)->grid[1], 4u);
            EXPECT_EQ(t.kernelInfo(e)->registersPerThread, 0u); // column absent -> 0
            EXPECT_EQ(t.name(t.event(t.launchOf(i))), "cudaLaunchKernel_v7000");
            // nsys packs pid and tid into globalTid: pid = (gt >> 24) & 0xFFFFFF, tid = gt & 0xFFFFFF.
            const Row& launchRow = t.rows()[t.event(t.launchOf(i)).row];
            EXPECT_EQ(launchRow.pid, (2533274790395999ll >> 24) & 0xFFFFFF);
            EXPECT_EQ(launchRow.tid, 2533274790395999ll & 0xFFFFFF);
        }
        if (e.kind == EventKind::NvtxRange) {
            EXPECT_EQ(t.name(e), "phase");
        }
        if (e.kind == EventKind::NvtxMark) {
            EXPECT_EQ(t.name(e), "here");
        }
    }
    // A SQLite file that is not an nsys export, and a file that is not SQLite.
    std::string other = (dir / "other.sqlite").string();
    sqlite3_open(other.c_str(), &db);
    sqlite3_exec(db, "CREATE TABLE t (x INT);", nullptr, nullptr, nullptr);
    sqlite3_close(db);
    EXPECT_THROW(importNsysSqlite(other), kl::InputError);
    std::string junk = (dir / "junk.sqlite").string();
    std::ofstream(junk) << "SQLite format 3" << std::string(200, '\x07');
    EXPECT_THROW(importTraceFile(junk), kl::InputError);
    std::filesystem::remove_all(dir);
}
