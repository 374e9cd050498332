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
} // namespace

GuardedArena::~GuardedArena()
{
    release();
}

void GuardedArena::init(CUdevice dev, std::uint64_t seed)
{
    m_dev = dev;
    m_rng.seed(seed);
    CUmemAllocationProp prop {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = static_cast<int>(dev);
    std::size_t g = 0;
    KL_CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    m_granularity = std::max<std::uint64_t>(g, 1u << 16);
}

void GuardedArena::release()
{
    for (const auto& [p, n] : m_mapped)
        cuMemUnmap(p, n);
    m_mapped.clear();
    if (m_physical)
        cuMemRelease(m_physical);
    m_physical = 0;
    m_physicalBytes = 0;
    if (m_va)
        cuMemAddressFree(m_va, m_vaBytes);
    m_va = 0;
    m_vaBytes = 0;
}

void GuardedArena::reset(std::uint64_t bytes)
{
    for (const auto& [p, n] : m_mapped)
        KL_CU(cuMemUnmap(p, n));
    m_mapped.clear();
    bytes = alignUp(bytes, m_granularity);
    if (bytes > m_physicalBytes) {
        release();
        const std::uint64_t want = std::max<std::uint64_t>(alignUp(bytes + bytes / 8, m_granularity), 512ull << 20);
        CUmemAllocationProp prop {};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = static_cast<int>(m_dev);
        const CUresult r = cuMemCreate(&m_physical, want, &prop, 0);
        if (r != CUDA_SUCCESS) {
            m_physical = 0;
            throw std::runtime_error(
                "cannot allocate " + std::to_string(want >> 20) + " MiB of device memory: " + cuErrorText(r));
        }
        m_physicalBytes = want;
        // Room for every granule twice over plus the unmapped holes between up to 4096 slabs.
        m_vaBytes = 2 * want + 4096 * kMaxHoleGranules * m_granularity;
        KL_CU(cuMemAddressReserve(&m_va, m_vaBytes, m_granularity, 0, 0));
    }
    m_physicalTop = 0;
    // A random start so no slab lands where it was in the previous call.
    m_vaTop = (1 + m_rng() % 256) * m_granularity;
}

CUdeviceptr GuardedArena::map(std::uint64_t bytes)
{
    bytes = alignUp(std::max<std::uint64_t>(bytes, 1), m_granularity);
    if (m_physicalTop + bytes > m_physicalBytes)
        throw std::runtime_error("candidate arena exhausted (internal sizing error)");
    const std::uint64_t hole = (1 + m_rng() % kMaxHoleGranules) * m_granularity;
    const CUdeviceptr at = m_va + m_vaTop + hole;
    if (m_vaTop + hole + bytes + kMaxHoleGranules * m_granularity > m_vaBytes)
        throw std::runtime_error("candidate address reservation exhausted (internal sizing error)");
    KL_CU(cuMemMap(at, bytes, m_physicalTop, m_physical, 0));
    m_mapped.emplace_back(at, bytes);
    CUmemAccessDesc access {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = static_cast<int>(m_dev);
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    KL_CU(cuMemSetAccess(at, bytes, &access, 1));
    m_physicalTop += bytes;
    m_vaTop += hole + bytes;
    return at;
}

LinearArena::~LinearArena()
{
    free();
}

void LinearArena::free()
{
    if (m_base)
        cuMemFree(m_base);
    m_base = 0;
    m_bytes = 0;
}

void LinearArena::reset(std::uint64_t bytes, CUstream s)
{
    bytes = alignUp(bytes + (8u << 20), 1u << 20);
    if (bytes > m_bytes) {
        KL_CU(cuStreamSynchronize(s));
        free();
        const std::uint64_t want = std::max<std::uint64_t>(bytes, 256ull << 20);
        const CUresult r = cuMemAlloc(&m_base, want);
        if (r != CUDA_SUCCESS) {
            m_base = 0;
            throw std::runtime_error(
                "cannot allocate " + std::to_string(want >> 20) + " MiB of harness memory: " + cuErrorText(r));
        }
        m_bytes = want;
    }
    m_top = 0;
}

CUdeviceptr LinearArena::alloc(std::uint64_t bytes)
{
    const std::uint64_t off = alignUp(m_top, 256);
    if (off + bytes > m_bytes)
        throw std::runtime_error("harness arena exhausted (internal sizing error)");
    m_top = off + bytes;
    return m_base + off;
}

} // namespace kl::worker
