#pragma once
// Device memory of the worker (kernels/HARNESS.md, "Isolation"). Both arenas use the driver's virtual-memory API
// so that what lies around every buffer is chosen, not left to the allocator:
//  - GuardedArena: the candidate's buffers. One reservation of virtual addresses; each slab is its own physical
//    allocation mapped at a random place with unmapped ranges before and after it, so a stray access beyond a
//    slab faults instead of reaching anything.
//  - HarnessArena: references, slots and lists. Its own 1 TiB reservation, apart from the candidate's, mapped at a
//    random granule inside it (chosen again whenever it grows): a candidate cannot derive its address from its own
//    pointers, and every wrong guess faults (the worker dies, the candidate is recorded `crashed`).
#include <cstdint>
#include <cuda.h>
#include <map>
#include <random>
#include <vector>

namespace kl::worker {

class GuardedArena {
public:
    GuardedArena() = default;
    GuardedArena(const GuardedArena&) = delete;
    GuardedArena& operator=(const GuardedArena&) = delete;
    ~GuardedArena();

    void init(CUdevice dev, std::uint64_t seed);
    std::uint64_t granularity() const { return m_granularity; }
    // Unmaps every slab (callers synchronize first) and makes room for `bytes` of mappings.
    void reset(std::uint64_t bytes);
    // Maps `bytes` (rounded to the granularity) behind and ahead of at least one unmapped granule.
    CUdeviceptr map(std::uint64_t bytes);
    std::uint64_t capacity() const { return m_pooledBytes + m_mappedBytes; }

private:
    struct Mapping {
        CUdeviceptr at;
        std::uint64_t bytes;
        CUmemGenericAllocationHandle handle;
    };
    void releasePool();
    CUmemGenericAllocationHandle create(std::uint64_t bytes);
    CUdevice m_dev = 0;
    std::uint64_t m_granularity = 2u << 20;
    CUdeviceptr m_va = 0;
    std::uint64_t m_vaBytes = 0;
    std::uint64_t m_vaTop = 0;
    std::vector<Mapping> m_mapped;
    std::uint64_t m_mappedBytes = 0;
    // Physical allocations of unmapped slabs by size: the same shapes come back in every verification.
    std::multimap<std::uint64_t, CUmemGenericAllocationHandle> m_pool;
    std::uint64_t m_pooledBytes = 0;
    std::mt19937_64 m_rng;
};

class HarnessArena {
public:
    HarnessArena() = default;
    HarnessArena(const HarnessArena&) = delete;
    HarnessArena& operator=(const HarnessArena&) = delete;
    ~HarnessArena();
    void init(CUdevice dev, std::uint64_t seed);
    // Resets the carving; grows (synchronizing s first, re-placed at a new random granule) when bytes do not fit.
    void reset(std::uint64_t bytes, CUstream s);
    CUdeviceptr alloc(std::uint64_t bytes);
    void free();
    std::uint64_t capacity() const { return m_bytes; }

private:
    CUdevice m_dev = 0;
    std::uint64_t m_granularity = 2u << 20;
    CUdeviceptr m_va = 0;
    std::uint64_t m_vaBytes = 0;
    CUmemGenericAllocationHandle m_physical = 0;
    CUdeviceptr m_base = 0; // where the physical allocation is mapped now, 0 when unmapped
    std::uint64_t m_bytes = 0;
    std::uint64_t m_top = 0;
    std::mt19937_64 m_rng;
};

} // namespace kl::worker
