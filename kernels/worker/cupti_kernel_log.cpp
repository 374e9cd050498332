#include "kernels/worker/cupti_kernel_log.h"

#include <cstdlib>
#include <mutex>

#ifdef KL_WORKER_HAVE_CUPTI
#include "profiler/cupti/kernel_activity.h"
#endif

namespace kl::worker {

namespace {
    std::mutex g_mutex;
    std::vector<KernelRecord> g_records;
    std::size_t g_dropped = 0;
    bool g_started = false;
    bool g_failed = false;
    std::string g_error;

#ifdef KL_WORKER_HAVE_CUPTI
    constexpr std::size_t kBufferBytes = 8u << 20;

    void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords)
    {
        *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
        *size = kBufferBytes;
        *maxNumRecords = 0;
    }

    void CUPTIAPI bufferCompleted(CUcontext ctx, uint32_t streamId, uint8_t* buffer, size_t, size_t validSize)
    {
        CUpti_Activity* record = nullptr;
        std::lock_guard lock(g_mutex);
        while (cuptiActivityGetNextRecord(buffer, validSize, &record) == CUPTI_SUCCESS) {
            if (const auto* k = prof::cupti::asKernelActivity(record))
                g_records.push_back(prof::cupti::kernelRecord(*k));
        }
        size_t dropped = 0;
        if (cuptiActivityGetNumDroppedRecords(ctx, streamId, &dropped) == CUPTI_SUCCESS)
            g_dropped += dropped;
        std::free(buffer);
    }
#endif
} // namespace

CuptiKernelLog& CuptiKernelLog::instance()
{
    static CuptiKernelLog log;
    return log;
}

bool CuptiKernelLog::available() const
{
#ifdef KL_WORKER_HAVE_CUPTI
    return !g_failed && std::getenv("KL_NO_CUPTI") == nullptr;
#else
    return false;
#endif
}

std::string CuptiKernelLog::error() const
{
#ifdef KL_WORKER_HAVE_CUPTI
    return g_error;
#else
    return "worker built without CUPTI";
#endif
}

void CuptiKernelLog::start()
{
#ifdef KL_WORKER_HAVE_CUPTI
    if (!available())
        return;
    {
        std::lock_guard lock(g_mutex);
        g_records.clear();
        g_dropped = 0;
    }
    if (!g_started) {
        if (cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted) != CUPTI_SUCCESS) {
            g_failed = true;
            g_error = "cuptiActivityRegisterCallbacks failed";
            return;
        }
        g_started = true;
    }
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        g_failed = true;
        g_error = "cuptiActivityEnable(CONCURRENT_KERNEL) failed";
    }
#endif
}

std::vector<KernelRecord> CuptiKernelLog::stop()
{
#ifdef KL_WORKER_HAVE_CUPTI
    if (!g_started || g_failed)
        return {};
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard lock(g_mutex);
    return std::move(g_records);
#else
    return {};
#endif
}

std::size_t CuptiKernelLog::dropped() const
{
    std::lock_guard lock(g_mutex);
    return g_dropped;
}

} // namespace kl::worker
