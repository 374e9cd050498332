#!/usr/bin/env python3
"""A copy of a pipeline whose named stages run the best accepted candidate of a tuning session.

    tuned_pipeline.py --pipeline DIR --out DIR --stage NAME=SESSION [--stage ...] [--kloop PATH]

Each SESSION's best is what `kloop session show SESSION --json` calls best; a session with none, or of another
problem than its stage, leaves that stage as the pipeline ships it, and says so. The other stages are unchanged.
"""
import argparse
import json
import os
import subprocess
import sys


def best_candidate(kloop, session):
    shown = json.loads(subprocess.run([kloop, "session", "show", session, "--json"], check=True,
                                      capture_output=True, text=True).stdout)
    return shown["problem"], shown.get("best")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipeline", required=True, help="the pipeline's folder (its pipeline.json)")
    ap.add_argument("--out", required=True, help="folder for the tuned copy's pipeline.json")
    ap.add_argument("--stage", action="append", default=[], metavar="NAME=SESSION")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--kloop", default=os.path.join(os.environ.get("BUILD_DIR", os.path.join(here, "../../build")),
                                                   "cli", "kloop"))
    a = ap.parse_args()
    with open(os.path.join(a.pipeline, "pipeline.json")) as f:
        pipeline = json.load(f)
    stages = {s["name"]: s for s in pipeline["stages"]}
    for item in a.stage:
        name, _, session = item.partition("=")
        if name not in stages or not session:
            sys.exit(f"tuned_pipeline.py: --stage {item}: expected NAME=SESSION with NAME one of {', '.join(stages)}")
        try:
            problem, best = best_candidate(a.kloop, session)
        except (subprocess.CalledProcessError, OSError, json.JSONDecodeError) as e:
            print(f"stage {name}: as shipped ({session} could not be read: {e})")
            continue
        if problem != stages[name]["problem"]:
            print(f"stage {name}: as shipped ({session} tunes {problem}, the stage runs {stages[name]['problem']})")
        elif not best:
            print(f"stage {name}: as shipped ({session} accepted nothing)")
        else:
            stages[name]["impl"] = {"session": os.path.abspath(session), "candidate": best}
            print(f"stage {name}: {best} of {session}")
    pipeline["description"] = pipeline.get("description", "") + " (stages from tuning sessions: tuned_pipeline.py)"
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "pipeline.json"), "w") as f:
        json.dump(pipeline, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
