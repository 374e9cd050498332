#pragma once
// Device memory of the two contexts (kernels/HARNESS.md, "Isolation").
//  - GuardedArena: the candidate context's buffers. One reservation of virtual addresses; each slab is mapped
//    from one physical allocation at a random place with unmapped ranges before and after it, so a stray access
//    beyond a slab faults instead of reaching anything.
//  - LinearArena: the harness context's memory (references, candidate copies, slots). A plain cuMemAlloc in
//    the harness's own context, i.e. another GPU address space: no candidate pointer can reach it.
#include <cstdint>
#include <cuda.h>
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
    // Maps `bytes` (a multiple of the granularity) behind and ahead of at least one unmapped granule.
    CUdeviceptr map(std::uint64_t bytes);
    std::uint64_t capacity() const { return m_physicalBytes; }

private:
    void release();
    CUdevice m_dev = 0;
    std::uint64_t m_granularity = 2u << 20;
    CUdeviceptr m_va = 0;
    std::uint64_t m_vaBytes = 0;
    CUmemGenericAllocationHandle m_physical = 0;
    std::uint64_t m_physicalBytes = 0;
    std::uint64_t m_physicalTop = 0;
    std::uint64_t m_vaTop = 0;
    std::vector<std::pair<CUdeviceptr, std::uint64_t>> m_mapped;
    std::mt19937_64 m_rng;
};

class LinearArena {
public:
    LinearArena() = default;
    LinearArena(const LinearArena&) = delete;
    LinearArena& operator=(const LinearArena&) = delete;
    ~LinearArena();
    // In the current context. Grows (after a synchronize) when bytes do not fit; resets the carving.
    void reset(std::uint64_t bytes, CUstream s);
    CUdeviceptr alloc(std::uint64_t bytes);
    void free();
    std::uint64_t capacity() const { return m_bytes; }

private:
    CUdeviceptr m_base = 0;
    std::uint64_t m_bytes = 0;
    std::uint64_t m_top = 0;
};

} // namespace kl::worker
