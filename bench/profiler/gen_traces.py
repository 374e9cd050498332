#!/usr/bin/env python3
"""Generate synthetic traces for the profiler ingest benchmark.

chrome: a PyTorch-profiler-shaped JSON trace (cpu_op, cuda_runtime launches, kernels with launch args,
        memcpy/memset, user annotations, ac2g flow pairs) with --events events in traceEvents.
nsys:   an Nsight Systems SQLite export with the documented tables (StringIds, CUPTI_ACTIVITY_KIND_KERNEL,
        _RUNTIME, _MEMCPY, _MEMSET, NVTX_EVENTS, TARGET_INFO_GPU) and --events activity rows.

Random but seeded: kernel names, durations and gaps vary, so nothing is tuned to one file.
"""
import argparse
import json
import random
import sqlite3
import os

KERNELS = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float>>(int, T1, T2)",
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>(T3)",
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>(Flash_fwd_params)",
    "void at::native::(anonymous namespace)::layer_norm_kernel<float>(long, float, const T1 *, T1 *)",
    "triton_poi_fused_add_mul_silu_0",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(T1::Params)",
]
CPU_OPS = ["aten::linear", "aten::matmul", "aten::add", "aten::layer_norm", "aten::softmax", "aten::silu", "aten::mul"]


def gen_chrome(path, n_events, seed):
    rng = random.Random(seed)
    pid, tid = 4242, 4242
    t = 1_712_195_495_505_583.0  # us, like real Kineto traces
    out = open(path, "w")
    out.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": '
              '150109978624, "computeMajor": 9, "computeMinor": 0, "numSms": 132}],\n"traceEvents": [\n')
    first = True
    count = 0
    corr = 1000
    ext = 1

    def emit(ev):
        nonlocal first, count
        if not first:
            out.write(",\n")
        first = False
        out.write(json.dumps(ev, separators=(",", ":")))
        count += 1

    emit({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}})
    emit({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "thread 4242 (python3)"}})
    step = 0
    gpu_t = t
    while count < n_events:
        # one "step" annotation around ~50 ops
        step_start = t
        ops = rng.randint(30, 60)
        for _ in range(ops):
            if count >= n_events:
                break
            op = rng.choice(CPU_OPS)
            op_start = t
            t += rng.uniform(2, 15)
            launch_start = t
            launch_dur = rng.uniform(3, 9)
            corr += 1
            ext += 1
            emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                  "ts": round(launch_start, 3), "dur": round(launch_dur, 3),
                  "args": {"External id": ext, "cbid": 211, "correlation": corr}})
            t += launch_dur
            k_start = max(gpu_t + rng.uniform(0.5, 3), launch_start + launch_dur + rng.uniform(1, 3))
            k_dur = rng.choice([rng.uniform(1.5, 8), rng.uniform(20, 400)])
            gpu_t = k_start + k_dur
            grid = [rng.choice([1, 4, 32, 132, 264, 1024]), rng.randint(1, 8), 1]
            emit({"ph": "X", "cat": "kernel", "name": rng.choice(KERNELS), "pid": 0, "tid": 7,
                  "ts": round(k_start, 3), "dur": round(k_dur, 3),
                  "args": {"External id": ext, "queued": 0, "device": 0, "context": 1, "stream": 7,
                           "correlation": corr, "registers per thread": rng.choice([32, 64, 128, 168]),
                           "shared memory": rng.choice([0, 16384, 49152, 98304]), "blocks per SM": 1.2,
                           "warps per SM": 4.8, "grid": grid, "block": [rng.choice([128, 256]), 1, 1],
                           "est. achieved occupancy %": rng.randint(5, 100)}})
            emit({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": round(launch_start, 3), "cat": "ac2g",
                  "name": "ac2g"})
            emit({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": round(k_start, 3), "cat": "ac2g",
                  "name": "ac2g", "bp": "e"})
            t += rng.uniform(1, 5)
            emit({"ph": "X", "cat": "cpu_op", "name": op, "pid": pid, "tid": tid, "ts": round(op_start, 3),
                  "dur": round(t - op_start, 3), "args": {"External id": ext, "Sequence number": ext,
                                                          "Fwd thread id": 0, "Input Dims": [[8, 1024], [1024, 1024]],
                                                          "Input type": ["c10::BFloat16", "c10::BFloat16"]}})
            if rng.random() < 0.03:
                corr += 1
                m_start = max(gpu_t, t) + 1
                nbytes = rng.choice([4096, 1 << 20, 64 << 20])
                emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": pid, "tid": tid,
                      "ts": round(t, 3), "dur": 5.0, "args": {"correlation": corr}})
                emit({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
                      "tid": 7, "ts": round(m_start, 3), "dur": round(nbytes / 25e3 + 1, 3),
                      "args": {"device": 0, "context": 1, "stream": 7, "correlation": corr, "bytes": nbytes,
                               "memory bandwidth (GB/s)": 25.0}})
                gpu_t = m_start + nbytes / 25e3 + 1
                t += 6
        emit({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid, "tid": tid,
              "ts": round(step_start, 3), "dur": round(t - step_start, 3), "args": {"External id": ext}})
        step += 1
        if rng.random() < 0.2:
            emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": pid, "tid": tid,
                  "ts": round(t, 3), "dur": round(max(gpu_t - t, 0) + 2, 3), "args": {"correlation": corr + 1}})
            corr += 1
            t = max(gpu_t, t) + 2
    out.write('\n],\n"traceName": "synthetic", "displayTimeUnit": "ms"}\n')
    out.close()
    return count


def gen_nsys(path, n_events, seed):
    rng = random.Random(seed)
    if os.path.exists(path):
        os.remove(path)
    db = sqlite3.connect(path)
    c = db.cursor()
    c.executescript("""
    CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
    CREATE TABLE TARGET_INFO_GPU (id INTEGER NOT NULL, name TEXT, busLocation TEXT, totalMemory INTEGER,
        smCount INTEGER, chipName TEXT, memoryBandwidth INTEGER);
    CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
    CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
        contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
        demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER,
        cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
        gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL,
        staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER,
        localMemoryTotal INTEGER, gridId INTEGER, sharedMemoryExecuted INTEGER, graphNodeId INTEGER,
        sharedMemoryLimitConfig INTEGER);
    CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
        globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER, callchainId INTEGER);
    CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
        contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
        copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER,
        srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER, graphNodeId INTEGER);
    CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
        contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL,
        bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
    CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
        category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
        domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
        int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
    """)
    strings = {}

    def sid(s):
        if s not in strings:
            strings[s] = len(strings) + 1
        return strings[s]

    c.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.6.1')")
    c.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H200', '0000:19:00.0', 150109978624, 132, 'GH100', "
              "4800000000000)")
    pid, tid = 31337, 31337
    global_tid = (pid << 24) | tid
    global_pid = pid << 24
    c.execute("INSERT INTO ThreadNames VALUES (?, 0, ?)", (sid("python3"), global_tid))
    t = 1_000_000_000
    gpu_t = t
    corr = 0
    n = 0
    kernels, runtime, memcpy, memset, nvtx = [], [], [], [], []
    launch = sid("cudaLaunchKernel_v7000")
    while n < n_events:
        step_start = t
        for _ in range(rng.randint(30, 60)):
            if n >= n_events:
                break
            corr += 1
            t += rng.randint(2000, 15000)
            ld = rng.randint(3000, 9000)
            runtime.append((t, t + ld, 1, global_tid, corr, launch, 0, None))
            ks = max(gpu_t + rng.randint(500, 3000), t + ld + rng.randint(1000, 3000))
            kd = rng.choice([rng.randint(1500, 8000), rng.randint(20000, 400000)])
            name = rng.choice(KERNELS)
            kernels.append((ks, ks + kd, 0, 1, 7, corr, global_pid, sid(name), sid(name.split("(")[0][-60:]), None,
                            0, 0, rng.choice([32, 64, 128]), rng.choice([1, 132, 264]), 1, 1, 256, 1, 1,
                            rng.choice([0, 16384]), 0, 0, 0, n, 0, None, 0))
            gpu_t = ks + kd
            t += ld
            n += 2
            r = rng.random()
            if r < 0.02:
                corr += 1
                runtime.append((t, t + 5000, 1, global_tid, corr, sid("cudaMemcpyAsync_v3020"), 0, None))
                ms = max(gpu_t, t) + 1000
                memcpy.append((ms, ms + 40000, 0, 1, 7, corr, global_pid, 1 << 20, 1, None, 0, 1, 0, 1, 0, 1, 0, None))
                gpu_t = ms + 40000
                t += 5000
                n += 2
            elif r < 0.03:
                corr += 1
                runtime.append((t, t + 3000, 1, global_tid, corr, sid("cudaMemsetAsync_v3020"), 0, None))
                ms = max(gpu_t, t) + 1000
                memset.append((ms, ms + 2000, 0, 1, 7, corr, global_pid, 0, 4096, None, 1))
                gpu_t = ms + 2000
                t += 3000
                n += 2
        nvtx.append((step_start, t, 59, None, None, None, f"step {len(nvtx)}", global_tid, None, None, 0, None, None,
                     None, None, None, None, None, None))
        n += 1
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + ",".join("?" * 27) + ")", kernels)
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)", runtime)
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (" + ",".join("?" * 18) + ")", memcpy)
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (" + ",".join("?" * 11) + ")", memset)
    c.executemany("INSERT INTO NVTX_EVENTS VALUES (" + ",".join("?" * 19) + ")", nvtx)
    c.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
    db.commit()
    db.close()
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("kind", choices=["chrome", "nsys"])
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    n = gen_chrome(a.out, a.events, a.seed) if a.kind == "chrome" else gen_nsys(a.out, a.events, a.seed)
    print(f"{a.out}: {n} events")


if __name__ == "__main__":
    main()
