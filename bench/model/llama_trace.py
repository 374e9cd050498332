"""Records a PyTorch profiler trace of a Hugging Face Llama (random init, bf16): prefill + decode steps.

The trace is what an engineer brings to KernelLoop: `kloop trace analyze` and `kloop session new --from-trace`
read it. record_shapes=True gives every aten op its input shapes; with_stack=True adds the nn.Module ranges
(`nn.Module: LlamaRMSNorm_0`) that name the model's layers.
"""
import argparse
import gzip
import json
import os
import shutil
import sys
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "regimes"))
from check_regimes import condition_holds  # noqa: E402  (the regime rule as the exported C dispatcher applies it)


# Llama-3-8B's layer shapes; a tiny variant (same head_dim 128 and GQA ratio) for CPU plumbing tests.
LLAMA3_8B_SHAPES = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                        vocab_size=128256)
TINY_SHAPES = dict(hidden_size=512, intermediate_size=1024, num_attention_heads=4, num_key_value_heads=1,
                   vocab_size=1024)


def llama_config(layers: int, tiny: bool = False) -> LlamaConfig:
    cfg = LlamaConfig(
        **(TINY_SHAPES if tiny else LLAMA3_8B_SHAPES),
        num_hidden_layers=layers,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
    )
    cfg._attn_implementation = "sdpa"
    return cfg


def build_model(layers: int, seed: int, device: str = "cuda", dtype=torch.bfloat16,
                tiny: bool = False) -> LlamaForCausalLM:
    # Few layers, so the trace stays small enough to keep in the repository.
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(llama_config(layers, tiny)).to(dtype)
    return model.eval()


@torch.inference_mode()
def prefill_and_decode(model, ids, decode_steps):
    out = model(input_ids=ids, use_cache=True)
    past = out.past_key_values
    token = out.logits[:, -1:].argmax(-1)
    for _ in range(decode_steps):
        out = model(input_ids=token, past_key_values=past, use_cache=True)
        past = out.past_key_values
        token = out.logits[:, -1:].argmax(-1)
    return token


class Bundle:
    """An exported bundle's torch ops (each built by its torch/kl_<name>.py loader). A regime dispatcher (kloop export
    of a session with regimes) holds one bundle per regime; the first regime whose condition holds at a shape takes
    it, as the bundle's C dispatcher decides. ops_at(dims): the ops whose dispatcher runs KernelLoop's candidate at
    dims, or None where the bundle would run its fallback (the problem's reference kernel): a model then keeps its
    own op there, as a deployment with a library fallback does."""

    def __init__(self, path: str):
        with open(os.path.join(path, "manifest.json")) as f:
            manifest = json.load(f)
        problem = manifest["problem"]
        self.problem = problem if isinstance(problem, str) else problem["name"]
        self.constants = {} if isinstance(problem, str) else problem.get("constants", {})
        self.regimes = []  # (condition or None, ops or None, manifest or None), in the dispatcher's order
        if manifest.get("kind") == "regime-dispatcher":
            for r in manifest["regimes"]:
                ops, sub = (None, None)
                if r.get("candidate"):
                    ops, sub = self._load(os.path.join(path, r["bundle"]), "_" + r["name"])
                self.regimes.append((r["condition"], ops, sub))
        else:
            self.regimes.append((None, *self._load(path, "")))

    def _load(self, path, suffix):
        with open(os.path.join(path, "manifest.json")) as f:
            manifest = json.load(f)
        sys.path.insert(0, os.path.join(path, "torch"))
        return __import__("kl_" + self.problem.lower() + suffix).load(), manifest

    def ops_at(self, dims: dict):
        dims = {**self.constants, **dims}
        for condition, ops, manifest in self.regimes:
            if condition is None or condition_holds(condition, dims):
                if ops is None:
                    return None
                full = {**manifest["problem"].get("constants", {}), **dims}
                return ops if int(ops.select([full[d] for d in manifest["dispatch"]["dims"]])) == 1 else None
        return None


def swap_rmsnorm(model, bundle_or_run) -> int:
    """Replaces every LlamaRMSNorm's forward by the bundle's op where its dispatcher runs the candidate (the module's
    own forward elsewhere), or by run(x [T, H], w, eps); returns how many modules it replaced."""
    replaced = 0
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            eps = float(getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6)))

            def forward(hidden, module=module, eps=eps, own=module.forward):
                flat = hidden.reshape(-1, hidden.shape[-1]).contiguous()
                if callable(bundle_or_run):
                    return bundle_or_run(flat, module.weight, eps).view_as(hidden)
                ops = bundle_or_run.ops_at({"T": flat.shape[0], "H": flat.shape[1]})
                return own(hidden) if ops is None else ops.run(flat, module.weight, eps).view_as(hidden)

            module.forward = forward
            replaced += 1
    return replaced


def use_exported_rmsnorm(model, bundle: str) -> int:
    """Replaces every LlamaRMSNorm's forward by the bundle's op where it runs KernelLoop's candidate."""
    return swap_rmsnorm(model, Bundle(bundle))


def wall_times(model, ids, decode_steps, runs):
    times = []
    for _ in range(runs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        prefill_and_decode(model, ids, decode_steps)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="trace path (.json or .json.gz)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-stack", action="store_true", help="leave out the nn.Module ranges")
    ap.add_argument("--rmsnorm-bundle", help="an exported rmsnorm bundle to use for the model's RMSNorm")
    ap.add_argument("--timing", help="write the wall times of --time-runs runs here (JSON)")
    ap.add_argument("--time-runs", type=int, default=7)
    ap.add_argument("--logits", help="write the prefill logits here (torch.save)")
    args = ap.parse_args()

    model = build_model(args.layers, args.seed)
    replaced = use_exported_rmsnorm(model, args.rmsnorm_bundle) if args.rmsnorm_bundle else 0
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.prefill), device="cuda")
    prefill_and_decode(model, ids, 2)  # warm-up: cuBLAS handles, allocator
    torch.cuda.synchronize()
    if args.logits:
        with torch.inference_mode():
            torch.save(model(input_ids=ids).logits[:, -8:].float().cpu(), args.logits)
    if args.timing:
        prefill_and_decode(model, ids, args.decode)  # every context length once: cuDNN's plans are cached
        times = wall_times(model, ids, args.decode, args.time_runs)
        with open(args.timing, "w") as f:
            json.dump({"wall_s": times, "median_s": sorted(times)[len(times) // 2], "rmsnorm_replaced": replaced,
                       "bundle": args.rmsnorm_bundle, "decode_steps": args.decode, "prefill": args.prefill}, f)

    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=not args.no_stack) as prof:
        prefill_and_decode(model, ids, args.decode)
        torch.cuda.synchronize()

    raw = args.out[:-3] if args.out.endswith(".gz") else args.out
    prof.export_chrome_trace(raw)
    with open(raw) as f:
        doc = json.load(f)
    doc.setdefault("kernelloop", {}).update({
        "model": "LlamaForCausalLM (random init, bf16), Llama-3-8B layer shapes",
        "layers": args.layers, "batch": args.batch, "prefill": args.prefill, "decode_steps": args.decode,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(), "record_shapes": True, "with_stack": not args.no_stack,
        "rmsnorm_bundle": args.rmsnorm_bundle, "rmsnorm_replaced": replaced,
    })
    with open(raw, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    if raw != args.out:
        with open(raw, "rb") as src, gzip.open(args.out, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        os.remove(raw)
    print(f"{args.out}: {len(doc.get('traceEvents', []))} events, torch {torch.__version__}, "
          f"transformers {transformers.__version__}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
