#include "profiler/kltrace_writer.h"

#include <nlohmann/json.hpp>

namespace kl::prof {
namespace {

    void append(std::string& out, const nlohmann::json& j)
    {
        out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += '\n';
    }

} // namespace

KlTraceWriter::KlTraceWriter(int64_t pid, const std::string& command)
{
    // The version key first: format detection looks for it at the start of the file (json dumps keys sorted).
    m_text = "{\"kltrace\":1,\"pid\":" + std::to_string(pid) + ",\"cmd\":" + nlohmann::json(command).dump() + "}\n";
}

void KlTraceWriter::device(const Device& d)
{
    append(m_text,
        { { "t", "dev" }, { "id", d.id }, { "d", d.id }, { "n", d.name }, { "sms", d.smCount },
            { "cc", { d.ccMajor, d.ccMinor } }, { "mem", d.globalMemBytes } });
}

void KlTraceWriter::rowName(int32_t device, int64_t stream, const std::string& name)
{
    append(m_text, { { "t", "row" }, { "d", device }, { "q", stream }, { "n", name } });
}

void KlTraceWriter::kernel(const KernelRecord& k, int32_t device)
{
    append(m_text,
        { { "t", "k" }, { "s", k.startNs }, { "e", k.endNs }, { "d", device }, { "q", k.stream },
            { "r", k.correlation }, { "n", k.name }, { "g", { k.grid[0], k.grid[1], k.grid[2] } },
            { "b", { k.block[0], k.block[1], k.block[2] } }, { "reg", k.registers }, { "ss", k.staticShared },
            { "ds", k.dynamicShared } });
}

void KlTraceWriter::sol(const SolMetrics& m, int32_t device, int64_t stream, uint32_t ordinalInRow)
{
    append(m_text,
        { { "t", "sol" }, { "n", m.name }, { "d", device }, { "q", stream }, { "i", ordinalInRow },
            { "dur", m.durationNs }, { "dram", m.dramThroughputPct }, { "sm", m.smThroughputPct },
            { "occ", m.achievedOccupancyPct }, { "dramB", m.dramBytes } });
}

void KlTraceWriter::warning(const std::string& text)
{
    append(m_text, { { "t", "warn" }, { "n", text } });
}

} // namespace kl::prof
