// Nsight Systems SQLite export importer (`nsys export --type sqlite`). Tables are optional (nsys creates them
// lazily); columns are looked up by name so older/newer schema versions load as long as the core columns exist.
#include "core/errors.h"
#include "profiler/importers.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#ifdef KL_PROFILER_HAVE_SQLITE
#include <sqlite3.h>
#endif

namespace kl::prof {

bool haveSqliteImport()
{
#ifdef KL_PROFILER_HAVE_SQLITE
    return true;
#else
    return false;
#endif
}

#ifndef KL_PROFILER_HAVE_SQLITE
Trace importNsysSqlite(const std::string& path, const ImportOptions&)
{
    throw InputError(path + ": this build has no SQLite support (install libsqlite3-dev and rebuild)");
}
#else

namespace {

    class Db {
    public:
        explicit Db(const std::string& path)
            : m_path(path)
        {
            if (sqlite3_open_v2(path.c_str(), &m_db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr)
                != SQLITE_OK) {
                std::string msg = m_db ? sqlite3_errmsg(m_db) : "out of memory";
                sqlite3_close(m_db);
                m_db = nullptr;
                throw InputError(path + ": cannot open as SQLite (" + msg + ")");
            }
        }
        ~Db() { sqlite3_close(m_db); }
        Db(const Db&) = delete;
        Db& operator=(const Db&) = delete;
        sqlite3* handle() { return m_db; }
        [[noreturn]] void fail(const std::string& what)
        {
            throw InputError(m_path + ": " + what + " (" + sqlite3_errmsg(m_db) + ")");
        }
        bool hasTable(const std::string& name)
        {
            Stmt s(*this, "SELECT 1 FROM sqlite_master WHERE type IN ('table','view') AND name=?1");
            sqlite3_bind_text(s.get(), 1, name.c_str(), -1, SQLITE_TRANSIENT);
            return s.step();
        }
        std::set<std::string> columns(const std::string& table)
        {
            std::set<std::string> out;
            Stmt s(*this, "PRAGMA table_info(\"" + table + "\")");
            while (s.step())
                if (const unsigned char* n = sqlite3_column_text(s.get(), 1))
                    out.insert(reinterpret_cast<const char*>(n));
            return out;
        }
        int64_t count(const std::string& table)
        {
            Stmt s(*this, "SELECT COUNT(*) FROM \"" + table + "\"");
            return s.step() ? sqlite3_column_int64(s.get(), 0) : 0;
        }

        class Stmt {
        public:
            Stmt(Db& db, const std::string& sql)
                : m_db(db)
            {
                if (sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &m_s, nullptr) != SQLITE_OK)
                    db.fail("cannot prepare \"" + sql.substr(0, 120) + "\"");
            }
            ~Stmt() { sqlite3_finalize(m_s); }
            Stmt(const Stmt&) = delete;
            Stmt& operator=(const Stmt&) = delete;
            bool step()
            {
                int rc = sqlite3_step(m_s);
                if (rc == SQLITE_ROW)
                    return true;
                if (rc == SQLITE_DONE)
                    return false;
                m_db.fail("query failed");
            }
            sqlite3_stmt* get() { return m_s; }
            int64_t i64(int c) { return sqlite3_column_int64(m_s, c); }
            bool isNull(int c) { return sqlite3_column_type(m_s, c) == SQLITE_NULL; }
            std::string_view text(int c)
            {
                const unsigned char* t = sqlite3_column_text(m_s, c);
                return t ? std::string_view(
                           reinterpret_cast<const char*>(t), static_cast<size_t>(sqlite3_column_bytes(m_s, c)))
                         : std::string_view {};
            }

        private:
            Db& m_db;
            sqlite3_stmt* m_s = nullptr;
        };

    private:
        std::string m_path;
        sqlite3* m_db = nullptr;
    };

    // Builds "SELECT a, b, NULL, ..." choosing for each wanted column the first existing alternative.
    std::string selectList(const std::set<std::string>& have, const std::vector<std::vector<std::string>>& wanted,
        const std::string& table, const std::string& path, size_t required)
    {
        std::string sql = "SELECT ";
        for (size_t i = 0; i < wanted.size(); ++i) {
            std::string pick;
            for (const auto& alt : wanted[i])
                if (have.count(alt)) {
                    pick = "\"" + alt + "\"";
                    break;
                }
            if (pick.empty()) {
                if (i < required)
                    throw InputError(path + ": table " + table + " has no column " + wanted[i][0]
                        + " (not an Nsight Systems export, or an unsupported schema version)");
                pick = "NULL";
            }
            sql += (i ? ", " : "") + pick;
        }
        return sql + " FROM \"" + table + "\"";
    }

    class NsysImporter {
    public:
        NsysImporter(const std::string& path, const ImportOptions& opts)
            : m_db(path)
            , m_path(path)
            , m_opts(opts)
        {
        }

        Trace run()
        {
            m_trace.meta().source = "nsys-sqlite";
            m_trace.meta().path = m_path;
            const char* tables[]
                = { "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER",
                      "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS" };
            bool any = false;
            for (const char* t : tables)
                if (m_db.hasTable(t)) {
                    any = true;
                    m_total += m_db.count(t);
                }
            if (!m_db.hasTable("StringIds"))
                throw InputError(m_path + ": no StringIds table: not an Nsight Systems SQLite export");
            if (!any)
                throw InputError(m_path + ": no CUDA or NVTX activity tables in this Nsight Systems export");
            loadStrings();
            loadDevices();
            loadThreadNames();
            if (m_db.hasTable("CUPTI_ACTIVITY_KIND_KERNEL"))
                loadKernels();
            if (m_db.hasTable("CUPTI_ACTIVITY_KIND_RUNTIME"))
                loadApi("CUPTI_ACTIVITY_KIND_RUNTIME", EventKind::RuntimeApi);
            if (m_db.hasTable("CUPTI_ACTIVITY_KIND_DRIVER"))
                loadApi("CUPTI_ACTIVITY_KIND_DRIVER", EventKind::DriverApi);
            if (m_db.hasTable("CUPTI_ACTIVITY_KIND_MEMCPY"))
                loadMem("CUPTI_ACTIVITY_KIND_MEMCPY", EventKind::Memcpy);
            if (m_db.hasTable("CUPTI_ACTIVITY_KIND_MEMSET"))
                loadMem("CUPTI_ACTIVITY_KIND_MEMSET", EventKind::Memset);
            if (m_db.hasTable("NVTX_EVENTS"))
                loadNvtx();
            if (m_opts.progress)
                m_opts.progress(1.0, "read " + std::to_string(m_done) + " rows; indexing");
            m_trace.finalize();
            return std::move(m_trace);
        }

    private:
        void tick()
        {
            ++m_done;
            if ((m_done & 0xfff) == 0) {
                if (m_opts.cancel.cancelled())
                    throw ImportCancelled();
                if (m_opts.progress && (m_done & 0x3ffff) == 0 && m_total > 0)
                    m_opts.progress(static_cast<double>(m_done) / static_cast<double>(m_total),
                        "read " + std::to_string(m_done) + " rows");
            }
        }

        void loadStrings()
        {
            Db::Stmt s(m_db, "SELECT id, value FROM StringIds");
            while (s.step())
                m_strings.emplace(s.i64(0), m_trace.strings().intern(s.text(1)));
        }

        StrId str(Db::Stmt& s, int col)
        {
            if (s.isNull(col))
                return 0;
            auto it = m_strings.find(s.i64(col));
            return it != m_strings.end() ? it->second : 0;
        }

        void loadDevices()
        {
            if (!m_db.hasTable("TARGET_INFO_GPU"))
                return;
            auto have = m_db.columns("TARGET_INFO_GPU");
            Db::Stmt s(m_db,
                selectList(have,
                    { { "id" }, { "name" }, { "smCount" }, { "totalMemory" }, { "computeMajor" }, { "computeMinor" } },
                    "TARGET_INFO_GPU", m_path, 1));
            while (s.step()) {
                Device d;
                d.id = static_cast<int32_t>(s.i64(0));
                d.name = std::string(s.text(1));
                d.smCount = static_cast<int32_t>(s.i64(2));
                d.globalMemBytes = static_cast<int64_t>(std::max<int64_t>(s.i64(3), 0));
                d.ccMajor = static_cast<int32_t>(s.i64(4));
                d.ccMinor = static_cast<int32_t>(s.i64(5));
                m_trace.addDevice(std::move(d));
            }
        }

        void loadThreadNames()
        {
            if (!m_db.hasTable("ThreadNames"))
                return;
            auto have = m_db.columns("ThreadNames");
            if (!have.count("nameId") || !have.count("globalTid"))
                return;
            Db::Stmt s(m_db, "SELECT nameId, globalTid FROM ThreadNames");
            while (s.step()) {
                auto it = m_strings.find(s.i64(0));
                if (it != m_strings.end())
                    m_threadNames[s.i64(1)] = it->second;
            }
        }

        static int64_t pidOf(int64_t globalTid) { return (globalTid >> 24) & 0xFFFFFF; }
        static int64_t tidOf(int64_t globalTid) { return globalTid & 0xFFFFFF; }

        uint32_t threadRow(int64_t globalTid)
        {
            uint32_t row = m_trace.cpuRow(pidOf(globalTid), tidOf(globalTid));
            if (auto it = m_threadNames.find(globalTid); it != m_threadNames.end()) {
                m_trace.setRowName(row,
                    std::string(m_trace.strings().view(it->second)) + " (" + std::to_string(tidOf(globalTid)) + ")");
                m_threadNames.erase(it);
            }
            return row;
        }

        void loadKernels()
        {
            const std::string t = "CUPTI_ACTIVITY_KIND_KERNEL";
            auto have = m_db.columns(t);
            Db::Stmt s(m_db,
                selectList(have,
                    { { "start" }, { "end" }, { "deviceId" }, { "streamId" }, { "correlationId" },
                        { "demangledName", "shortName", "mangledName" }, { "gridX" }, { "gridY" }, { "gridZ" },
                        { "blockX" }, { "blockY" }, { "blockZ" }, { "registersPerThread" }, { "staticSharedMemory" },
                        { "dynamicSharedMemory" } },
                    t, m_path, 6));
            while (s.step()) {
                tick();
                Event e;
                e.start = s.i64(0);
                e.end = std::max(e.start, s.i64(1));
                int32_t dev = static_cast<int32_t>(std::clamp<int64_t>(s.i64(2), -1, 1 << 20));
                int64_t stream = s.i64(3);
                e.row = m_trace.gpuRow(dev, stream);
                e.name = str(s, 5);
                KernelInfo k;
                k.correlation = static_cast<uint32_t>(s.i64(4));
                for (int i = 0; i < 3; ++i) {
                    k.grid[i] = static_cast<uint32_t>(std::clamp<int64_t>(s.i64(6 + i), 0, 0xffffffffll));
                    k.block[i] = static_cast<uint32_t>(std::clamp<int64_t>(s.i64(9 + i), 0, 0xffffffffll));
                }
                k.registersPerThread = static_cast<uint32_t>(std::clamp<int64_t>(s.i64(12), 0, 1 << 20));
                k.staticSharedMemory = static_cast<uint32_t>(std::clamp<int64_t>(s.i64(13), 0, 1ll << 31));
                k.dynamicSharedMemory = static_cast<uint32_t>(std::clamp<int64_t>(s.i64(14), 0, 1ll << 31));
                k.stream = static_cast<uint32_t>(stream);
                k.device = dev;
                m_trace.addKernel(e, k);
            }
        }

        void loadApi(const std::string& t, EventKind kind)
        {
            auto have = m_db.columns(t);
            Db::Stmt s(m_db,
                selectList(have, { { "start" }, { "end" }, { "globalTid" }, { "correlationId" }, { "nameId" } }, t,
                    m_path, 5));
            int64_t lastTid = -1;
            uint32_t lastRow = 0;
            while (s.step()) {
                tick();
                Event e;
                e.start = s.i64(0);
                e.end = std::max(e.start, s.i64(1));
                int64_t gt = s.i64(2);
                if (gt != lastTid) {
                    lastRow = threadRow(gt);
                    lastTid = gt;
                }
                e.row = lastRow;
                e.name = str(s, 4);
                e.kind = kind;
                m_trace.addEvent(e, static_cast<uint32_t>(s.i64(3)));
            }
        }

        StrId copyKindName(int64_t k)
        {
            static const char* names[]
                = { "unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP" };
            return m_trace.strings().intern(k >= 0 && k <= 10 ? names[k] : "unknown");
        }

        void loadMem(const std::string& t, EventKind kind)
        {
            auto have = m_db.columns(t);
            bool copy = kind == EventKind::Memcpy;
            Db::Stmt s(m_db,
                selectList(have,
                    { { "start" }, { "end" }, { "deviceId" }, { "streamId" }, { "correlationId" }, { "bytes" },
                        { copy ? "copyKind" : "memKind" } },
                    t, m_path, 6));
            StrId memsetName = m_trace.strings().intern("Memset");
            StrId memsetKind = m_trace.strings().intern("memset");
            while (s.step()) {
                tick();
                Event e;
                e.start = s.i64(0);
                e.end = std::max(e.start, s.i64(1));
                int32_t dev = static_cast<int32_t>(std::clamp<int64_t>(s.i64(2), -1, 1 << 20));
                int64_t stream = s.i64(3);
                e.row = m_trace.gpuRow(dev, stream);
                e.kind = kind;
                MemOpInfo m;
                m.correlation = static_cast<uint32_t>(s.i64(4));
                m.bytes = static_cast<uint64_t>(std::max<int64_t>(s.i64(5), 0));
                m.stream = static_cast<uint32_t>(stream);
                m.device = dev;
                if (copy) {
                    m.copyKind = copyKindName(s.i64(6));
                    e.name = m_trace.strings().intern("Memcpy " + std::string(m_trace.strings().view(m.copyKind)));
                } else {
                    m.copyKind = memsetKind;
                    e.name = memsetName;
                }
                m_trace.addMemOp(e, m);
            }
        }

        void loadNvtx()
        {
            const std::string t = "NVTX_EVENTS";
            auto have = m_db.columns(t);
            Db::Stmt s(m_db,
                selectList(have, { { "start" }, { "end" }, { "eventType" }, { "text" }, { "textId" }, { "globalTid" } },
                    t, m_path, 3));
            while (s.step()) {
                tick();
                int64_t type = s.i64(2);
                // 34 mark, 59 push/pop range, 60 start/end range; the rest are domain/category/thread naming.
                if (type != 34 && type != 59 && type != 60)
                    continue;
                Event e;
                e.start = s.i64(0);
                e.end = s.isNull(1) ? e.start : std::max(e.start, s.i64(1));
                e.kind = type == 34 ? EventKind::NvtxMark : EventKind::NvtxRange;
                e.name = !s.isNull(3) ? m_trace.strings().intern(s.text(3)) : str(s, 4);
                e.row = threadRow(s.isNull(5) ? 0 : s.i64(5));
                m_trace.addEvent(e);
            }
        }

        Db m_db;
        std::string m_path;
        const ImportOptions& m_opts;
        Trace m_trace;
        std::unordered_map<int64_t, StrId> m_strings;
        std::unordered_map<int64_t, StrId> m_threadNames;
        int64_t m_total = 0;
        int64_t m_done = 0;
    };

} // namespace

Trace importNsysSqlite(const std::string& path, const ImportOptions& opts)
{
    NsysImporter imp(path, opts);
    return imp.run();
}
#endif

} // namespace kl::prof
