#include "profiler/cupti/capture.h"

#include "profiler/cupti/collector.h"
#include "profiler/importers.h"

#include <algorithm>
#include <stdexcept>
#include <unistd.h>

namespace kl::prof {

CuptiCapture::CuptiCapture(CaptureOptions opts)
    : m_opts(opts)
{
}

CuptiCapture::~CuptiCapture()
{
    if (m_running)
        cupti::stopCollection();
}

void CuptiCapture::start()
{
    if (m_running)
        throw std::runtime_error("CuptiCapture::start: already running");
    m_lines = cupti::headerLine(getpid(), "in-process capture");
    cupti::CollectorOptions o;
    o.runtimeApi = m_opts.runtimeApi;
    o.driverApi = m_opts.driverApi;
    o.memory = m_opts.memory;
    o.markers = true;
    o.devices = true;
    std::string e = cupti::startCollection(o, [this](const std::string& lines) { m_lines += lines; });
    if (!e.empty())
        throw std::runtime_error("CUPTI capture: " + e);
    m_running = true;
}

Trace CuptiCapture::stop()
{
    if (!m_running)
        throw std::runtime_error("CuptiCapture::stop: not running");
    std::string e = cupti::stopCollection();
    m_running = false;
    if (!e.empty())
        m_lines += "{\"t\":\"warn\",\"n\":" + cupti::jsonEscape(e) + "}\n";
    std::string lines = std::move(m_lines);
    m_lines.clear();
    MemorySource src(lines);
    return importKlTrace(src, "<in-process capture>");
}

void attachSol(Trace& trace, const cupti::RangeProfile& sol)
{
    std::vector<uint32_t> kernels;
    for (uint32_t i = 0; i < trace.eventCount(); ++i)
        if (trace.event(i).kind == EventKind::Kernel)
            kernels.push_back(i);
    std::sort(kernels.begin(), kernels.end(),
        [&](uint32_t a, uint32_t b) { return trace.event(a).start < trace.event(b).start; });
    for (size_t k = 0; k < sol.kernels.size(); ++k) {
        SolMetrics m(sol.kernels[k]);
        if (k < kernels.size()) {
            m.event = kernels[k];
            m.name = std::string(trace.name(trace.event(kernels[k])));
        }
        trace.addSol(std::move(m));
    }
}

} // namespace kl::prof
