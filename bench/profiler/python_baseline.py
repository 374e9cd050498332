#!/usr/bin/env python3
"""Python baseline for the ingest benchmark: parse the same file with the standard library only.

chrome: json.load of the whole trace, then one pass that builds (ts, dur, name, cat) tuples for X events.
nsys:   sqlite3 fetch of every kernel/runtime/memcpy/memset/NVTX row with names joined from StringIds.
Prints one JSON line: records, wall and CPU seconds, peak RSS.
"""
import json
import resource
import sqlite3
import sys
import time


def chrome(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    out = []
    for e in events:
        if e.get("ph") == "X":
            out.append((e["ts"], e.get("dur", 0), e.get("name"), e.get("cat")))
    return len(events), len(out)


def nsys(path):
    db = sqlite3.connect(path)
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    n = 0
    rows = []
    for r in db.execute("SELECT start, end, deviceId, streamId, correlationId, demangledName, gridX, blockX, "
                        "registersPerThread FROM CUPTI_ACTIVITY_KIND_KERNEL"):
        rows.append((r[0], r[1], strings.get(r[5]), r[2], r[3], r[4]))
    for r in db.execute("SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
        rows.append((r[0], r[1], strings.get(r[4]), r[2], r[3]))
    for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        for r in db.execute(f"SELECT start, end, deviceId, streamId, correlationId, bytes FROM {t}"):
            rows.append(r)
    for r in db.execute("SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS"):
        rows.append((r[0], r[1], r[2] if r[2] is not None else strings.get(r[3]), r[4]))
    n = len(rows)
    return n, n


def main():
    kind, path = sys.argv[1], sys.argv[2]
    w0, c0 = time.perf_counter(), time.process_time()
    records, kept = chrome(path) if kind == "chrome" else nsys(path)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"tool": "python", "kind": kind, "records": records, "kept": kept, "wall_s": round(wall, 4),
                      "cpu_s": round(cpu, 4), "peak_rss_bytes": rss}))


if __name__ == "__main__":
    main()
