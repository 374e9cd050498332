"""FlashInfer-Bench's side of the round trip (tests/cli/kloop_flashinfer_bench_test.cpp), run by the python of
scripts/flashinfer-bench-venv: their pydantic models write the Definition and Workloads that kloop imports, and
their loaders read back what kloop exported.

  write ROOT               a TraceSet folder with one rmsnorm Definition and its workload traces
  check ROOT HARDWARE LANGUAGE   loads ROOT as their TraceSet.from_path does, asserts the records (LANGUAGE: cuda
                                 or triton), prints them as JSON

The package root imports torch and the benchmark runner, which the venv leaves out; the data layer does not need
them, so its modules are loaded without running flashinfer_bench/__init__.py.
"""

import importlib.util
import json
import math
import pathlib
import sys
import types


def load_data_layer():
    root = pathlib.Path(importlib.util.find_spec("flashinfer_bench").origin).parent
    for name, path in (("flashinfer_bench", root), ("flashinfer_bench.data", root / "data")):
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules[name] = module
    from flashinfer_bench.data import definition, json_utils, solution, trace, workload

    return definition, json_utils, solution, trace, workload


definition, json_utils, solution, trace, workload = load_data_layer()

DEFINITION = "rmsnorm_h4096"
OP_TYPE = "rmsnorm"
# Two workloads share a shape: its tuning weight is 2.
WORKLOADS = [("w-decode", 1), ("w-small", 16), ("w-small-again", 16), ("w-mid", 256), ("w-prefill", 4096)]

REFERENCE = '''import torch

def run(hidden_states, weight):
    x = hidden_states.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (y * weight.float()).to(hidden_states.dtype)
'''


def write(root):
    d = definition.Definition(
        name=DEFINITION,
        op_type=OP_TYPE,
        axes={"batch_size": definition.AxisVar(), "hidden_size": definition.AxisConst(value=4096)},
        inputs={
            "hidden_states": definition.TensorSpec(shape=["batch_size", "hidden_size"], dtype="bfloat16"),
            "weight": definition.TensorSpec(shape=["hidden_size"], dtype="bfloat16"),
        },
        outputs={"output": definition.TensorSpec(shape=["batch_size", "hidden_size"], dtype="bfloat16")},
        reference=REFERENCE,
        description="RMSNorm with hidden size 4096",
    )
    json_utils.save_json_file(d, root / "definitions" / OP_TYPE / f"{DEFINITION}.json")
    traces = [
        trace.Trace(
            definition=DEFINITION,
            workload=workload.Workload(
                axes={"batch_size": n},
                inputs={"hidden_states": workload.RandomInput(), "weight": workload.RandomInput()},
                uuid=uuid,
            ),
        )
        for uuid, n in WORKLOADS
    ]
    json_utils.save_jsonl_file(traces, root / "workloads" / OP_TYPE / f"{DEFINITION}.jsonl")


def check(root, hardware, language):
    # As TraceSet.from_path reads a dataset folder.
    definitions = [json_utils.load_json_file(definition.Definition, p) for p in sorted(root.glob("definitions/**/*.json"))]
    solutions = [json_utils.load_json_file(solution.Solution, p) for p in sorted(root.glob("solutions/**/*.json"))]
    traces = [t for p in sorted(root.glob("traces/**/*.jsonl")) for t in json_utils.load_jsonl_file(trace.Trace, p)]

    assert [d.name for d in definitions] == [DEFINITION], definitions
    assert definitions[0].const_axes == {"hidden_size": 4096}, definitions[0].const_axes
    assert definitions[0].var_axes == ["batch_size"], definitions[0].var_axes
    assert len(solutions) == 1, solutions
    s = solutions[0]
    assert s.definition == DEFINITION, s.definition
    assert s.spec.language == solution.SupportedLanguages(language), s.spec.language
    assert s.spec.target_hardware == [hardware], s.spec.target_hardware
    entry = s.get_entry_source()
    marker = {"cuda": "__global__", "triton": "@triton.jit"}[language]
    assert entry is not None and marker in entry.content, s.spec.entry_point
    assert s.get_entry_symbol() in entry.content, s.spec.entry_point

    assert traces, "no traces"
    uuids = dict(WORKLOADS)
    seen = set()
    out = []
    for t in traces:
        assert not t.is_workload_trace(), t
        assert t.definition == DEFINITION and t.solution == s.name, (t.definition, t.solution)
        assert set(t.workload.axes) == {"batch_size"}, t.workload.axes
        if t.workload.uuid in uuids:
            assert t.workload.axes["batch_size"] == uuids[t.workload.uuid], t.workload
            seen.add(t.workload.uuid)
        e = t.evaluation
        assert t.is_successful(), e.status
        assert e.environment.hardware == hardware, e.environment
        assert e.correctness.max_absolute_error >= 0 and math.isnan(e.correctness.max_relative_error), e.correctness
        p = e.performance
        assert p.latency_ms > 0 and p.reference_latency_ms > 0 and p.speedup_factor > 0, p
        out.append({"uuid": t.workload.uuid, "batch_size": t.workload.axes["batch_size"], "latency_ms": p.latency_ms,
                    "reference_latency_ms": p.reference_latency_ms, "speedup": p.speedup_factor,
                    "status": e.status.value})
    # Every workload shape is a tuning shape, so each is timed; the duplicate shape keeps the first uuid.
    assert seen == {u for u, _ in WORKLOADS} - {"w-small-again"}, seen
    print(json.dumps({"solution": s.name, "entry_point": s.spec.entry_point, "traces": out}))


if __name__ == "__main__":
    command, root = sys.argv[1], pathlib.Path(sys.argv[2])
    if command == "write":
        write(root)
    elif command == "check":
        check(root, sys.argv[3], sys.argv[4])
    else:
        sys.exit(f"unknown command {command}")
