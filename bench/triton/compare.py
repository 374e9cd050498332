"""One table per problem: our tuned CUDA template, our tuned Triton template (both the best correct candidate of a
`kloop run` session, per-shape median latency as the harness measured it) and Liger-Kernel (liger_times.py).

    python3 bench/triton/compare.py --problem rmsnorm --cuda SESSION --triton SESSION --liger liger.json
"""
import argparse
import glob
import json
import os


def best_of(session):
    best = None
    for path in glob.glob(os.path.join(session, "candidates", "*", "evaluation.json")):
        with open(path) as f:
            ev = json.load(f)
        if ev.get("verdict") not in ("accepted", "correct") or ev.get("objective") is None:
            continue
        timed = [s for s in ev["shapes"] if s.get("timing") and not s.get("held_out")]
        if not timed:
            continue
        if best is None or ev["objective"] > best[0]["objective"]:
            cand = os.path.dirname(path)
            params = {}
            cpath = os.path.join(cand, "candidate.json")
            if os.path.exists(cpath):
                with open(cpath) as f:
                    params = json.load(f).get("params", {})
            best = (ev, os.path.basename(cand), params)
    return best


def key(dims):
    return ",".join(f"{k}={dims[k]}" for k in sorted(dims))


def per_shape(ev):
    out = {}
    for s in ev["shapes"]:
        if s.get("timing") and not s.get("held_out"):
            out[key(s["shape"]["dims"])] = (s["timing"]["median_us"], (s.get("baseline_timing") or {}).get("median_us"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", required=True)
    ap.add_argument("--cuda", required=True)
    ap.add_argument("--triton", required=True)
    ap.add_argument("--liger", required=True)
    a = ap.parse_args()
    try:
        with open(a.liger) as f:
            liger = json.load(f)
    except (OSError, ValueError) as e:
        liger = {a.problem: {}}
        print(f"(no Liger-Kernel times: {e})")
    lig = {key(dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in k.split(","))): v
           for k, v in liger.get(a.problem, {}).items()}
    rows = []
    found = {}
    for name, session in (("cuda", a.cuda), ("triton", a.triton)):
        b = best_of(session)
        found[name] = b
    print(f"### {a.problem}\n")
    for name in ("cuda", "triton"):
        b = found[name]
        print(f"- {name}: " + (f"best accepted candidate {b[1]}, objective {b[0]['objective']:.3f}x over the naive "
                               f"baseline, params {json.dumps(b[2])}" if b else "no accepted timed candidate"))
    print()
    print("| shape | naive baseline (us) | CUDA template, tuned (us) | Triton template, tuned (us) | Liger-Kernel (us) "
          "| Triton / Liger | CUDA / Liger |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    cuda = per_shape(found["cuda"][0]) if found["cuda"] else {}
    tri = per_shape(found["triton"][0]) if found["triton"] else {}
    for shape in sorted(set(cuda) | set(tri) | set(lig), key=lambda s: [int(x.split("=")[1]) for x in s.split(",")]):
        c = cuda.get(shape, (None, None))
        t = tri.get(shape, (None, None))
        base = c[1] or t[1]
        l = lig.get(shape)
        fmt = lambda v: f"{v:.2f}" if v else "-"
        ratio = lambda v: f"{l / v:.2f}x" if v and l else "-"
        print(f"| {shape} | {fmt(base)} | {fmt(c[0])} | {fmt(t[0])} | {fmt(l)} | {ratio(t[0])} | {ratio(c[0])} |")
    print("\n(x/Liger columns: Liger's time divided by ours; above 1 is faster than Liger.)\n")


if __name__ == "__main__":
    main()
