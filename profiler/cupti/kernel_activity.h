#pragma once
// The one decoder of CUPTI kernel activity records, header-only so that both the collector (compiled into the
// injection library, which links nothing of KernelLoop) and the GPU worker's kernel log use it without a link
// dependency between kernels/ and profiler/.
#include "core/gpu_records.h"

#include <cupti.h>

namespace kl::prof::cupti {

// The one place to bump when CUPTI's kernel record version changes (CUDA 13.0: Kernel10).
using KernelActivity = CUpti_ActivityKernel10;

// The record as a kernel activity; nullptr for every other kind.
inline const KernelActivity* asKernelActivity(const CUpti_Activity* record)
{
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
        return nullptr;
    return reinterpret_cast<const KernelActivity*>(record);
}

// The name stays mangled, as CUPTI reports it.
inline KernelRecord kernelRecord(const KernelActivity& k)
{
    KernelRecord r;
    r.name = k.name ? k.name : "";
    r.startNs = k.start;
    r.endNs = k.end;
    r.grid[0] = k.gridX;
    r.grid[1] = k.gridY;
    r.grid[2] = k.gridZ;
    r.block[0] = k.blockX;
    r.block[1] = k.blockY;
    r.block[2] = k.blockZ;
    r.registers = k.registersPerThread;
    r.staticShared = k.staticSharedMemory;
    r.dynamicShared = k.dynamicSharedMemory;
    r.stream = k.streamId;
    r.correlation = k.correlationId;
    r.deviceLaunched = k.isDeviceLaunched != 0;
    return r;
}

} // namespace kl::prof::cupti
