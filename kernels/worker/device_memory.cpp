#include "kernels/worker/device_memory.h"

#include "kernels/worker/cuda_check.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kl::worker {

namespace {
    std::uint64_t alignUp(std::uint64_t v, std::uint64_t a)
    {
        return (v + a - 1) / a * a;
    }
    constexpr std::uint64_t kMaxHoleGranules = 8;
    // Unmapped slabs' physical memory kept for reuse, at most this much.
    constexpr std::uint64_t kPoolLimit = 24ull << 30;
    // The harness's reservation: its mapping lands at a random granule of this range.
    constexpr std::uint64_t kHarnessReservation = 1ull << 40;

    CUmemAllocationProp deviceProp(CUdevice dev)
    {
        CUmemAllocationProp prop {};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = static_cast<int>(dev);
        return prop;
    }

    std::uint64_t granularityOf(CUdevice dev)
    {
        CUmemAllocationProp prop = deviceProp(dev);
        std::size_t g = 0;
        KL_CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
        return std::max<std::uint64_t>(g, 1u << 16);
    }

    void mapReadWrite(CUdevice dev, CUdeviceptr at, std::uint64_t bytes, CUmemGenericAllocationHandle h)
    {
        KL_CU(cuMemMap(at, bytes, 0, h, 0));
        CUmemAccessDesc access {};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = static_cast<int>(dev);
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        KL_CU(cuMemSetAccess(at, bytes, &access, 1));
    }
} // namespace

GuardedArena::~GuardedArena()
{
    for (const auto& m : m_mapped) {
        cuMemUnmap(m.at, m.bytes);
        cuMemRelease(m.handle);
    }
    releasePool();
    if (m_va)
        cuMemAddressFree(m_va, m_vaBytes);
}

void GuardedArena::init(CUdevice dev, std::uint64_t seed)
{
    m_dev = dev;
    m_rng.seed(seed);
    m_granularity = granularityOf(dev);
}

void GuardedArena::releasePool()
{
    for (const auto& [bytes, h] : m_pool)
        cuMemRelease(h);
    m_pool.clear();
    m_pooledBytes = 0;
}

CUmemGenericAllocationHandle GuardedArena::create(std::uint64_t bytes)
{
    CUmemAllocationProp prop = deviceProp(m_dev);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = cuMemCreate(&h, bytes, &prop, 0);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && !m_pool.empty()) {
        releasePool();
        r = cuMemCreate(&h, bytes, &prop, 0);
    }
    if (r != CUDA_SUCCESS)
        throw std::runtime_error(
            "cannot allocate " + std::to_string(bytes >> 20) + " MiB of device memory: " + cuErrorText(r));
    return h;
}

void GuardedArena::reset(std::uint64_t bytes)
{
    for (const auto& m : m_mapped) {
        KL_CU(cuMemUnmap(m.at, m.bytes));
        m_pool.emplace(m.bytes, m.handle);
        m_pooledBytes += m.bytes;
    }
    m_mapped.clear();
    m_mappedBytes = 0;
    if (m_pooledBytes > kPoolLimit)
        releasePool();
    // Room for every granule twice over plus the unmapped holes between up to 4096 slabs.
    const std::uint64_t want = 2 * alignUp(bytes, m_granularity) + 4096 * kMaxHoleGranules * m_granularity;
    if (want > m_vaBytes) {
        if (m_va)
            KL_CU(cuMemAddressFree(m_va, m_vaBytes));
        m_vaBytes = std::max<std::uint64_t>(want, 64ull << 30);
        KL_CU(cuMemAddressReserve(&m_va, m_vaBytes, m_granularity, 0, 0));
    }
    // A random start so no slab lands where it was in the previous call.
    m_vaTop = (1 + m_rng() % 256) * m_granularity;
}

CUdeviceptr GuardedArena::map(std::uint64_t bytes)
{
    bytes = alignUp(std::max<std::uint64_t>(bytes, 1), m_granularity);
    const std::uint64_t hole = (1 + m_rng() % kMaxHoleGranules) * m_granularity;
    if (m_vaTop + hole + bytes + kMaxHoleGranules * m_granularity > m_vaBytes)
        throw std::runtime_error("candidate address reservation exhausted (internal sizing error)");
    CUmemGenericAllocationHandle h = 0;
    if (auto it = m_pool.find(bytes); it != m_pool.end()) {
        h = it->second;
        m_pool.erase(it);
        m_pooledBytes -= bytes;
    } else {
        h = create(bytes);
    }
    const CUdeviceptr at = m_va + m_vaTop + hole;
    try {
        mapReadWrite(m_dev, at, bytes, h);
    } catch (...) {
        cuMemRelease(h);
        throw;
    }
    m_mapped.push_back({ at, bytes, h });
    m_mappedBytes += bytes;
    m_vaTop += hole + bytes;
    return at;
}

HarnessArena::~HarnessArena()
{
    free();
}

void HarnessArena::init(CUdevice dev, std::uint64_t seed)
{
    m_dev = dev;
    m_rng.seed(seed);
    m_granularity = granularityOf(dev);
}

void HarnessArena::free()
{
    if (m_base)
        cuMemUnmap(m_base, m_bytes);
    m_base = 0;
    if (m_physical)
        cuMemRelease(m_physical);
    m_physical = 0;
    m_bytes = 0;
    if (m_va)
        cuMemAddressFree(m_va, m_vaBytes);
    m_va = 0;
    m_vaBytes = 0;
}

void HarnessArena::reset(std::uint64_t bytes, CUstream s)
{
    bytes = alignUp(bytes + (8u << 20), m_granularity);
    if (bytes > m_bytes) {
        KL_CU(cuStreamSynchronize(s));
        if (m_base)
            KL_CU(cuMemUnmap(m_base, m_bytes));
        m_base = 0;
        if (m_physical)
            KL_CU(cuMemRelease(m_physical));
        m_physical = 0;
        m_bytes = 0;
        const std::uint64_t want = std::max<std::uint64_t>(bytes, 256ull << 20);
        CUmemAllocationProp prop = deviceProp(m_dev);
        const CUresult r = cuMemCreate(&m_physical, want, &prop, 0);
        if (r != CUDA_SUCCESS) {
            m_physical = 0;
            throw std::runtime_error(
                "cannot allocate " + std::to_string(want >> 20) + " MiB of harness memory: " + cuErrorText(r));
        }
        m_bytes = want;
        if (!m_va) {
            m_vaBytes = kHarnessReservation;
            KL_CU(cuMemAddressReserve(&m_va, m_vaBytes, m_granularity, 0, 0));
        }
        if (m_bytes > m_vaBytes)
            throw std::runtime_error("harness reservation too small (internal sizing error)");
        // A random granule of the reservation, chosen again whenever the arena grows.
        const std::uint64_t slots = (m_vaBytes - m_bytes) / m_granularity;
        m_base = m_va + (m_rng() % (slots + 1)) * m_granularity;
        mapReadWrite(m_dev, m_base, m_bytes, m_physical);
    }
    m_top = 0;
}

CUdeviceptr HarnessArena::alloc(std::uint64_t bytes)
{
    const std::uint64_t off = alignUp(m_top, 256);
    if (off + bytes > m_bytes)
        throw std::runtime_error("harness arena exhausted (internal sizing error)");
    m_top = off + bytes;
    return m_base + off;
}

} // namespace kl::worker
