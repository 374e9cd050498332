// Speed-of-light counters through the CUDA 13 Range Profiler + Profiler Host API (the old Profiling API session
// calls are deprecated in 13.0). Pattern verified on the H200 (shared/research/h200-probe/probe.cu, mode range).
#include "profiler/cupti/range_profiler.h"

#include <cuda.h>
#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <dlfcn.h>
#include <string>
#include <vector>

namespace kl::prof::cupti {
namespace {

    // CUPTI parameter structs: zeroed, with their size set (what the *_STRUCT_SIZE initialiser idiom does).
    template <class T> T params(size_t structSize)
    {
        T p {};
        p.structSize = structSize;
        return p;
    }

    struct Fail {
        std::string why;
    };

    void check(CUptiResult rc, const char* what)
    {
        if (rc == CUPTI_SUCCESS)
            return;
        const char* s = nullptr;
        cuptiGetResultString(rc, &s);
        std::string why = std::string(what) + ": " + (s ? s : "unknown CUPTI error");
        if (rc == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
            why += " (performance counters are restricted to admin users on this driver, what ncu reports as "
                   "ERR_NVGPUCTRPERM: load the driver with NVreg_RestrictProfilingToAdminUsers=0 or run as root)";
        throw Fail { why };
    }

    const char* kMetrics[] = {
        "gpu__time_duration.sum",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
    };
    constexpr size_t kNumMetrics = sizeof(kMetrics) / sizeof(kMetrics[0]);

    // The driver API is resolved at run time so that binaries linking kl_profiler_cupti start (and skip their GPU
    // work) on machines without libcuda, such as CI.
    struct Driver {
        CUresult (*ctxGetCurrent)(CUcontext*) = nullptr;
        CUresult (*ctxGetDevice)(CUdevice*) = nullptr;
        CUresult (*ctxSynchronize)() = nullptr;
        Driver()
        {
            void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
            if (!h)
                h = dlopen("libcuda.so.1", RTLD_NOW);
            if (!h)
                return;
            ctxGetCurrent = reinterpret_cast<CUresult (*)(CUcontext*)>(dlsym(h, "cuCtxGetCurrent"));
            ctxGetDevice = reinterpret_cast<CUresult (*)(CUdevice*)>(dlsym(h, "cuCtxGetDevice"));
            ctxSynchronize = reinterpret_cast<CUresult (*)()>(dlsym(h, "cuCtxSynchronize"));
        }
        bool ok() const { return ctxGetCurrent && ctxGetDevice && ctxSynchronize; }
    };

    const Driver& driver()
    {
        static Driver d;
        return d;
    }

} // namespace

RangeProfile profileKernels(const std::function<void()>& launch, size_t maxKernels)
{
    RangeProfile res;
    if (!driver().ok()) {
        res.unavailableReason = "libcuda.so.1 (the NVIDIA driver) is not available";
        return res;
    }
    CUcontext ctx = nullptr;
    if (driver().ctxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) {
        res.unavailableReason = "no current CUDA context on the calling thread";
        return res;
    }
    CUdevice dev = 0;
    driver().ctxGetDevice(&dev);
    bool profilerUp = false;
    CUpti_Profiler_Host_Object* host = nullptr;
    CUpti_RangeProfiler_Object* rp = nullptr;
    auto teardown = [&] {
        if (rp) {
            auto dp = params<CUpti_RangeProfiler_Disable_Params>(CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE);
            dp.pRangeProfilerObject = rp;
            cuptiRangeProfilerDisable(&dp);
            rp = nullptr;
        }
        if (host) {
            auto hd
                = params<CUpti_Profiler_Host_Deinitialize_Params>(CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE);
            hd.pHostObject = host;
            cuptiProfilerHostDeinitialize(&hd);
            host = nullptr;
        }
        if (profilerUp) {
            auto di = params<CUpti_Profiler_DeInitialize_Params>(CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE);
            cuptiProfilerDeInitialize(&di);
            profilerUp = false;
        }
    };
    try {
        auto ip = params<CUpti_Profiler_Initialize_Params>(CUpti_Profiler_Initialize_Params_STRUCT_SIZE);
        check(cuptiProfilerInitialize(&ip), "cuptiProfilerInitialize");
        profilerUp = true;
        auto cn = params<CUpti_Device_GetChipName_Params>(CUpti_Device_GetChipName_Params_STRUCT_SIZE);
        cn.deviceIndex = static_cast<size_t>(dev);
        check(cuptiDeviceGetChipName(&cn), "cuptiDeviceGetChipName");
        std::string chip = cn.pChipName;
        auto ca = params<CUpti_Profiler_GetCounterAvailability_Params>(
            CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE);
        ca.ctx = ctx;
        check(cuptiProfilerGetCounterAvailability(&ca), "cuptiProfilerGetCounterAvailability");
        std::vector<uint8_t> avail(ca.counterAvailabilityImageSize);
        ca.pCounterAvailabilityImage = avail.data();
        check(cuptiProfilerGetCounterAvailability(&ca), "cuptiProfilerGetCounterAvailability");

        auto hi = params<CUpti_Profiler_Host_Initialize_Params>(CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE);
        hi.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
        hi.pChipName = chip.c_str();
        hi.pCounterAvailabilityImage = avail.data();
        check(cuptiProfilerHostInitialize(&hi), "cuptiProfilerHostInitialize");
        host = hi.pHostObject;
        std::vector<const char*> metrics(kMetrics, kMetrics + kNumMetrics);
        auto am = params<CUpti_Profiler_Host_ConfigAddMetrics_Params>(
            CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE);
        am.pHostObject = host;
        am.ppMetricNames = metrics.data();
        am.numMetrics = metrics.size();
        check(cuptiProfilerHostConfigAddMetrics(&am), "cuptiProfilerHostConfigAddMetrics");
        auto cs = params<CUpti_Profiler_Host_GetConfigImageSize_Params>(
            CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE);
        cs.pHostObject = host;
        check(cuptiProfilerHostGetConfigImageSize(&cs), "cuptiProfilerHostGetConfigImageSize");
        std::vector<uint8_t> config(cs.configImageSize);
        auto ci
            = params<CUpti_Profiler_Host_GetConfigImage_Params>(CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE);
        ci.pHostObject = host;
        ci.pConfigImage = config.data();
        ci.configImageSize = config.size();
        check(cuptiProfilerHostGetConfigImage(&ci), "cuptiProfilerHostGetConfigImage");
        auto np
            = params<CUpti_Profiler_Host_GetNumOfPasses_Params>(CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE);
        np.pConfigImage = config.data();
        np.configImageSize = config.size();
        check(cuptiProfilerHostGetNumOfPasses(&np), "cuptiProfilerHostGetNumOfPasses");
        res.passes = np.numOfPasses;

        auto en = params<CUpti_RangeProfiler_Enable_Params>(CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE);
        en.ctx = ctx;
        check(cuptiRangeProfilerEnable(&en), "cuptiRangeProfilerEnable");
        rp = en.pRangeProfilerObject;
        auto gs = params<CUpti_RangeProfiler_GetCounterDataSize_Params>(
            CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE);
        gs.pRangeProfilerObject = rp;
        gs.pMetricNames = metrics.data();
        gs.numMetrics = metrics.size();
        gs.maxNumOfRanges = maxKernels;
        gs.maxNumRangeTreeNodes = maxKernels;
        check(cuptiRangeProfilerGetCounterDataSize(&gs), "cuptiRangeProfilerGetCounterDataSize");
        std::vector<uint8_t> counterData(gs.counterDataSize);
        auto cdi = params<CUpti_RangeProfiler_CounterDataImage_Initialize_Params>(
            CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE);
        cdi.pRangeProfilerObject = rp;
        cdi.counterDataSize = counterData.size();
        cdi.pCounterData = counterData.data();
        check(cuptiRangeProfilerCounterDataImageInitialize(&cdi), "cuptiRangeProfilerCounterDataImageInitialize");
        auto sc = params<CUpti_RangeProfiler_SetConfig_Params>(CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE);
        sc.pRangeProfilerObject = rp;
        sc.configSize = config.size();
        sc.pConfig = config.data();
        sc.counterDataImageSize = counterData.size();
        sc.pCounterDataImage = counterData.data();
        // AutoRange + KernelReplay: one range per kernel; user ranges with kernel replay are rejected by CUPTI.
        sc.range = CUPTI_AutoRange;
        sc.replayMode = CUPTI_KernelReplay;
        sc.maxRangesPerPass = maxKernels;
        sc.numNestingLevels = 1;
        sc.minNestingLevel = 1;
        sc.passIndex = 0;
        sc.targetNestingLevel = 1;
        check(cuptiRangeProfilerSetConfig(&sc), "cuptiRangeProfilerSetConfig");

        auto st = params<CUpti_RangeProfiler_Start_Params>(CUpti_RangeProfiler_Start_Params_STRUCT_SIZE);
        st.pRangeProfilerObject = rp;
        check(cuptiRangeProfilerStart(&st), "cuptiRangeProfilerStart");
        launch();
        driver().ctxSynchronize();
        auto sp = params<CUpti_RangeProfiler_Stop_Params>(CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE);
        sp.pRangeProfilerObject = rp;
        check(cuptiRangeProfilerStop(&sp), "cuptiRangeProfilerStop");
        auto dd = params<CUpti_RangeProfiler_DecodeData_Params>(CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE);
        dd.pRangeProfilerObject = rp;
        check(cuptiRangeProfilerDecodeData(&dd), "cuptiRangeProfilerDecodeData");
        auto gi = params<CUpti_RangeProfiler_GetCounterDataInfo_Params>(
            CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE);
        gi.pCounterDataImage = counterData.data();
        gi.counterDataImageSize = counterData.size();
        check(cuptiRangeProfilerGetCounterDataInfo(&gi), "cuptiRangeProfilerGetCounterDataInfo");
        for (size_t r = 0; r < gi.numTotalRanges; ++r) {
            auto ri = params<CUpti_RangeProfiler_CounterData_GetRangeInfo_Params>(
                CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE);
            ri.pCounterDataImage = counterData.data();
            ri.counterDataImageSize = counterData.size();
            ri.rangeIndex = r;
            ri.rangeDelimiter = "/";
            check(cuptiRangeProfilerCounterDataGetRangeInfo(&ri), "cuptiRangeProfilerCounterDataGetRangeInfo");
            std::vector<double> v(metrics.size());
            auto ev = params<CUpti_Profiler_Host_EvaluateToGpuValues_Params>(
                CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE);
            ev.pHostObject = host;
            ev.pCounterDataImage = counterData.data();
            ev.counterDataImageSize = counterData.size();
            ev.rangeIndex = r;
            ev.ppMetricNames = metrics.data();
            ev.numMetrics = metrics.size();
            ev.pMetricValues = v.data();
            check(cuptiProfilerHostEvaluateToGpuValues(&ev), "cuptiProfilerHostEvaluateToGpuValues");
            SolCounters m;
            m.name = ri.rangeName ? ri.rangeName : std::to_string(r);
            m.durationNs = v[0];
            m.dramThroughputPct = v[1];
            m.smThroughputPct = v[2];
            m.achievedOccupancyPct = v[3];
            m.dramBytes = v[4] + v[5];
            res.kernels.push_back(std::move(m));
        }
        if (dd.numOfRangeDropped)
            res.unavailableReason = std::to_string(dd.numOfRangeDropped) + " ranges dropped (more than "
                + std::to_string(maxKernels) + " kernels)";
        res.available = true;
    } catch (const Fail& f) {
        res.available = false;
        res.unavailableReason = f.why;
    } catch (...) {
        // The launch itself failed (a CUDA error the caller reports): leave CUPTI clean for the next request.
        teardown();
        throw;
    }
    teardown();
    return res;
}

} // namespace kl::prof::cupti
