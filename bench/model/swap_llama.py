#!/usr/bin/env python3
"""Engagement proof (issue 19): KernelLoop's exported PyTorch ops inside a Hugging Face Llama, end to end.

A random-init bf16 LlamaForCausalLM with Llama-3-8B layer shapes (llama_trace.build_model) runs prefill 1024 +
64 greedy decode steps twice, interleaved: stock (transformers' StaticCache + SDPA, its RMSNorm, act_fn(gate) * up)
and ours, where the `kloop export` bundles replace
  - every RMSNorm                       -> torch.ops.kl_rmsnorm.run(x, w, eps)
  - the MLP's act_fn(gate_proj(x)) * up_proj(x) -> torch.ops.kl_silu_and_mul.run(x @ [gate; up]^T)   (the op takes
    gate|up as one [T, 2I] tensor, so gate_proj and up_proj become one GEMM: named in the output)
  - the attention decode (q_len 1)      -> torch.ops.kl_decode_attention.run over a paged KV cache (PS 64,
    identity block table) that the swapped attention writes; prefill keeps SDPA (not the target).
A bundle not given falls back to stock for that op, and the output says so; where a bundle's dispatcher would run its
fallback (outside the shapes its candidate was verified faster at), ours runs PyTorch's op (the pure-PyTorch versions
below), and the table's dispatch column says which one ran at the decode shape.

CUDA graphs on both sides: the decode step (token, position, static KV cache -> logits) is captured once with
torch.cuda.graph and replayed; prefill runs eager (one call, compute-bound). Manual capture rather than
torch.compile(mode="reduce-overhead") because the exported ops register CUDA kernels only (no fake-tensor
kernels), so dynamo would break the graph at each of them; a manual capture takes the whole step, ours and stock
alike, which bench/export/check_torch.py shows the ops survive.

Logits are compared teacher-forced: ours is fed the stock model's greedy tokens, so every step sees the same
input; reported are max abs / rel-l2 diffs and argmax agreement over the 64 steps. A torch.profiler trace of ours
counts the kernels whose name starts with each bundle's prefix (kl_<problem>).

    swap_llama.py --out-dir DIR [--rmsnorm-bundle B] [--silu-bundle B] [--attention-bundle B]
    swap_llama.py --device cpu --tiny --out-dir DIR     # plumbing test: pure-PyTorch STAND-INS, no graphs
Writes DIR/swap-llama.json, DIR/swap-llama.md and DIR/ours-trace.json.gz.
"""
import argparse
import copy
import gzip
import inspect
import json
import math
import os
import re
import shutil
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_trace import Bundle, build_model, swap_rmsnorm  # noqa: E402

import transformers  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

TAKES_CACHE_POSITION = "cache_position" in inspect.signature(modeling_llama.LlamaModel.forward).parameters
CACHE_KWARG = "cache" if "cache" in inspect.signature(modeling_llama.LlamaModel.forward).parameters else "past_key_values"


# Pure PyTorch with the exported ops' signatures: the CPU plumbing test's stand-ins, and what ours runs where a
# bundle's dispatcher would run its fallback (the problem's reference kernel): PyTorch is the library there.
def standin_rmsnorm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def standin_silu_and_mul(x):
    i = x.shape[-1] // 2
    return F.silu(x[:, :i]) * x[:, i:]


def standin_decode_attention(q, k_cache, v_cache, block_table, seq_lens, scale):
    b, hq, d = q.shape
    hkv = k_cache.shape[2]
    k = k_cache[block_table.long()].reshape(b, -1, hkv, d).transpose(1, 2).repeat_interleave(hq // hkv, 1)
    v = v_cache[block_table.long()].reshape(b, -1, hkv, d).transpose(1, 2).repeat_interleave(hq // hkv, 1)
    s = torch.einsum("bhd,bhld->bhl", q.float(), k.float()) * scale
    valid = torch.arange(k.shape[2], device=q.device)[None, :] < seq_lens[:, None]
    p = torch.softmax(s.masked_fill(~valid[:, None, :], float("-inf")), -1)
    return torch.einsum("bhl,bhld->bhd", p, v.float()).to(q.dtype)


STANDINS = {"rmsnorm": standin_rmsnorm, "silu_and_mul": standin_silu_and_mul,
            "decode_attention": standin_decode_attention}

# Each op's problem dims from its arguments (the problems' named constants come from the bundle).
DIMS_OF = {"rmsnorm": lambda x, w, eps: {"T": x.shape[0], "H": x.shape[1]},
           "silu_and_mul": lambda x: {"T": x.shape[0], "I": x.shape[1] // 2},
           "decode_attention": lambda q, k_cache, v_cache, block_table, seq_lens, scale: {
               "B": q.shape[0], "HQ": q.shape[1], "PS": k_cache.shape[1], "MAXP": block_table.shape[1]}}


class Op:
    """One swapped op: the bundle's run() (or a labelled stand-in), its prefix and where it came from."""

    def __init__(self, problem, bundle, standin):
        self.problem, self.prefix, self.bundle = problem, "kl_" + problem, None
        self.source, self.fn = "stock (no bundle given)", None
        if bundle:
            try:
                self.bundle = Bundle(bundle)

                # The shape is known when the graph is captured: the choice is made once per captured step.
                def fn(*args, _stock=STANDINS[problem], _dims=DIMS_OF[problem]):
                    ops = self.bundle.ops_at(_dims(*args))
                    return _stock(*args) if ops is None else ops.run(*args)

                self.source, self.fn = f"bundle {os.path.basename(os.path.abspath(bundle))}", fn
            except Exception as e:  # a bundle that does not build or load: that op stays stock, and the table says why
                self.source = f"stock (bundle {bundle} failed to load: {type(e).__name__}: {str(e)[:160]})"
        elif standin:
            label = f"{self.prefix}_STANDIN"

            def fn(*args, _f=STANDINS[problem], _label=label):
                with torch.profiler.record_function(_label):
                    return _f(*args)

            self.source, self.fn = "pure-PyTorch STAND-IN (not KernelLoop's kernel)", fn

    def dispatch(self, dims):
        """What the bundle's dispatcher picks at the decode shape: its candidate, or its fallback (PyTorch runs)."""
        if not self.bundle:
            return "n/a"
        return "candidate" if self.bundle.ops_at(dims) is not None else "fallback: PyTorch's op runs"


def swap_mlp(model, run):
    for layer in model.model.layers:
        mlp = layer.mlp
        mlp.gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight], 0).contiguous()

        def forward(x, mlp=mlp):
            flat = x.reshape(-1, x.shape[-1])
            return mlp.down_proj(run(F.linear(flat, mlp.gate_up)).view(*x.shape[:-1], -1))

        mlp.forward = forward


class PagedCache:
    """Per-layer paged K/V caches [B * MAXP, PS, HKV, D] with the identity block table: page p of sequence b is
    block b * MAXP + p, so the cache is also a contiguous [B, MAXP * PS, HKV, D] that index_copy_ writes."""

    PAGE = 16  # decode_attention's smaller page: its tuning shapes' contexts (MAXP from 32) cover this model's 1088

    def __init__(self, cfg, batch, max_len, device, dtype, page=PAGE):
        self.page, self.pages = page, math.ceil(max_len / page)
        d, hkv = cfg.hidden_size // cfg.num_attention_heads, cfg.num_key_value_heads
        shape = (batch * self.pages, page, hkv, d)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_hidden_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_hidden_layers)]
        self.block_table = torch.arange(batch * self.pages, device=device, dtype=torch.int32).view(batch, self.pages)


def swap_attention(model, run, cache: PagedCache):
    for idx, layer in enumerate(model.model.layers):
        attn = layer.self_attn

        def forward(hidden_states, position_embeddings=None, attention_mask=None, *args, attn=attn, idx=idx,
                    **kwargs):
            pos = kwargs.get("cache_position")
            pos = kwargs["position_ids"][0] if pos is None else pos
            b, s, _ = hidden_states.shape
            d = attn.head_dim
            q = attn.q_proj(hidden_states).view(b, s, -1, d).transpose(1, 2)
            k = attn.k_proj(hidden_states).view(b, s, -1, d).transpose(1, 2)
            v = attn.v_proj(hidden_states).view(b, s, -1, d).transpose(1, 2)
            cos, sin = position_embeddings
            q, k = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
            kc, vc = cache.k[idx], cache.v[idx]
            kc.view(b, -1, *kc.shape[2:]).index_copy_(1, pos, k.transpose(1, 2).to(kc.dtype))
            vc.view(b, -1, *vc.shape[2:]).index_copy_(1, pos, v.transpose(1, 2).to(vc.dtype))
            if s > 1:  # prefill from position 0: stock SDPA over the prompt
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2)
            else:
                seq_lens = (pos[-1:] + 1).to(torch.int32).expand(b).contiguous()
                o = run(q.reshape(b, -1, d).contiguous(), kc, vc, cache.block_table, seq_lens, attn.scaling)
            return attn.o_proj(o.reshape(b, s, -1)), None

        attn.forward = forward


def static_cache(model, batch, max_len):
    cfg = model.config
    try:  # transformers >= 4.56
        return transformers.StaticCache(config=cfg, max_cache_len=max_len)
    except TypeError:
        return transformers.StaticCache(config=cfg, max_batch_size=batch, max_cache_len=max_len,
                                        device=model.device, dtype=model.dtype)


class Runner:
    """Prefill (eager) and a decode step (CUDA graph when graphs=True) with static inputs."""

    def __init__(self, model, batch, kv, graphs):
        self.model, self.kv, self.graphs, self.graph = model, kv, graphs, None
        dev = model.device
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)

    @torch.inference_mode()
    def _forward(self, ids, pos):
        # transformers < 5.2x takes cache_position; later ones track the position in the StaticCache (a device
        # tensor, advanced inside the captured graph) and take position_ids only.
        extra = {"cache_position": pos} if TAKES_CACHE_POSITION else {}
        extra[CACHE_KWARG] = self.kv
        return self.model(input_ids=ids, position_ids=pos.view(1, -1).expand(ids.shape[0], -1),
                          use_cache=self.kv is not None, **extra).logits[:, -1]

    def prefill(self, ids):
        if self.kv is not None:
            self.kv.reset()
        return self._forward(ids, torch.arange(ids.shape[1], device=ids.device))

    @torch.inference_mode()
    def step(self, token, p):
        self.token.copy_(token)
        self.pos.fill_(p)
        if not self.graphs:
            return self._forward(self.token, self.pos)
        if self.graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # warm-up outside capture: cuBLAS handles, allocator
                    self._forward(self.token, self.pos)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.logits = self._forward(self.token, self.pos)
        self.graph.replay()
        return self.logits

    def generate(self, ids, steps, forced=None, keep=False):
        """Greedy decode (or fed `forced` tokens); returns (tokens, per-step logits if keep, decode seconds)."""
        logits = self.prefill(ids)
        tokens, kept = [], []
        sync()
        t0 = time.perf_counter()
        for i in range(steps):
            token = logits.argmax(-1, keepdim=True) if forced is None else forced[i]
            tokens.append(token)
            logits = self.step(token, ids.shape[1] + i)
            if keep:
                kept.append(logits.float().clone())
        sync()
        return tokens, kept, time.perf_counter() - t0


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def diffs(ours, stock):
    o, s = torch.stack(ours).double(), torch.stack(stock).double()
    return {"max_abs": (o - s).abs().max().item(), "rel_l2": ((o - s).norm() / s.norm().clamp(min=1e-30)).item(),
            "argmax_agree": float((o.argmax(-1) == s.argmax(-1)).float().mean().item()),
            "argmax_agree_steps": int((o.argmax(-1) == s.argmax(-1)).all(-1).sum().item()), "steps": len(ours)}


def kernel_name_prefixed(name, prefix):
    """The bundle renames its kernels kl_<problem>_<candidate|fallback>__<name>; traces show them demangled
    (`void kl_...(args)` for templates) or mangled (`_Z<len>kl_...`)."""
    bare = name.removeprefix("void ")
    return bare.startswith(prefix) or re.match(r"_Z\d+" + re.escape(prefix), name) is not None


def count_prefixed(events, prefixes):
    counts = {p: {} for p in prefixes}
    for e in events:
        for p in prefixes:
            if e.get("cat") in ("kernel", "user_annotation") and kernel_name_prefixed(e.get("name", ""), p):
                name = e["name"].split("(")[0]
                counts[p][name] = counts[p].get(name, 0) + 1
    return counts


def profile_ours(runner, ids, steps, prefixes, path):
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA]
                                                    if torch.cuda.is_available() else [])
    with torch.profiler.profile(activities=acts) as prof:
        runner.generate(ids, steps)
        # One decode step outside the graph too, in case this CUPTI does not report kernels inside graph replays.
        runner._forward(runner.token, runner.pos)
        sync()
    raw = path[:-3]
    prof.export_chrome_trace(raw)
    events = json.load(open(raw)).get("traceEvents", [])
    with open(raw, "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(raw)
    return count_prefixed(events, prefixes)


def table(r):
    s, o = r["stock"], r["ours"]
    lines = [f"# swap_llama: exported ops in a Hugging Face Llama ({r['device']})", "",
             f"- model: {r['model']}; batch {r['batch']}, prefill {r['prefill']}, decode {r['decode_steps']}; "
             f"CUDA graphs: {r['graphs']}; torch {r['torch']}, transformers {r['transformers']}", ""]
    lines += ["| op | ours uses | dispatch at the decode shape | launches named kl_<problem>* in the profile |",
              "|---|---|---|---|"]
    for name, op in r["ops"].items():
        seen = r["profile_prefixed"].get(op["prefix"], {})
        names = ", ".join(f"`{k}` x{v}" for k, v in sorted(seen.items())[:3])
        lines.append(f"| {name} | {op['source']} | {op['dispatch']} | {sum(seen.values())} {names} |")
    lines += ["", "| | stock | ours | ours / stock |", "|---|---|---|---|",
              f"| decode tokens/s (median of {r['runs']}) | {s['decode_tokens_per_s']:.1f} | "
              f"{o['decode_tokens_per_s']:.1f} | {o['decode_tokens_per_s'] / s['decode_tokens_per_s']:.3f} |",
              f"| decode ms/step | {1e3 * s['decode_s'] / r['decode_steps']:.3f} | "
              f"{1e3 * o['decode_s'] / r['decode_steps']:.3f} | |",
              f"| prefill + decode s | {s['total_s']:.4f} | {o['total_s']:.4f} | {o['total_s'] / s['total_s']:.3f} |",
              "", f"Logits (teacher-forced, {r['logits']['steps']} steps): max abs diff {r['logits']['max_abs']:.3g}, "
              f"rel-l2 {r['logits']['rel_l2']:.3g} ({'within' if r['logits']['agree'] else 'OUTSIDE'} "
              f"{r['logits']['rel_tol']:g}), argmax agreement {100 * r['logits']['argmax_agree']:.1f}%; "
              f"prefill logits rel-l2 {r['prefill_logits_rel_l2']:.3g}.", ""]
    lines += [f"- {n}" for n in r["notes"]]
    return "\n".join(lines) + "\n"


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--rmsnorm-bundle")
    ap.add_argument("--silu-bundle")
    ap.add_argument("--attention-bundle")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny config, fp32, stand-in ops: CPU plumbing test")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prefill", type=int, default=1024)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rel-tol", type=float, help="logits rel-l2 that passes (default 2e-2 bf16, 1e-4 fp32); "
                    "argmax agreement is reported, not gated: a random-init model has near-ties")
    a = ap.parse_args()
    if a.tiny:
        a.prefill, a.decode, a.runs, a.layers = min(a.prefill, 48), min(a.decode, 8), min(a.runs, 2), min(a.layers, 2)
    os.makedirs(a.out_dir, exist_ok=True)
    graphs = a.device.startswith("cuda")
    dtype = torch.bfloat16 if graphs else torch.float32

    stock = build_model(a.layers, a.seed, a.device, dtype, a.tiny)
    ours = copy.deepcopy(stock)
    cfg = stock.config
    max_len = a.prefill + a.decode
    ops = {"rmsnorm": Op("rmsnorm", a.rmsnorm_bundle, a.tiny), "silu_and_mul": Op("silu_and_mul", a.silu_bundle, a.tiny),
           "decode_attention": Op("decode_attention", a.attention_bundle, a.tiny)}
    notes = []
    if ops["rmsnorm"].fn:
        notes.append(f"RMSNorm modules swapped: {swap_rmsnorm(ours, ops['rmsnorm'].fn)}")
    if ops["silu_and_mul"].fn:
        swap_mlp(ours, ops["silu_and_mul"].fn)
        notes.append("ours: gate_proj and up_proj run as one GEMM into [T, 2I] (the silu_and_mul op's input); "
                     "stock keeps two GEMMs, so part of any MLP gain is that merge")
    paged = None
    if ops["decode_attention"].fn:
        paged = PagedCache(cfg, a.batch, max_len, a.device, dtype)
        swap_attention(ours, ops["decode_attention"].fn, paged)
        notes.append(f"ours: own paged KV cache (PS {paged.page}, MAXP {paged.pages}), attention over seq_len only; "
                     f"stock: StaticCache of {max_len} with SDPA over the masked full length")
    for name, op in ops.items():
        if not op.fn:
            notes.append(f"{name}: ours uses STOCK for it: {op.source}")
        elif op.bundle is None:
            notes.append(f"{name}: pure-PyTorch STAND-IN, no KernelLoop kernel ran (CPU plumbing test)")
    hd = cfg.hidden_size // cfg.num_attention_heads
    shapes = {"rmsnorm": {"T": a.batch, "H": cfg.hidden_size}, "silu_and_mul": {"T": a.batch, "I": cfg.intermediate_size},
              "decode_attention": {"B": a.batch, "HQ": cfg.num_attention_heads, "PS": PagedCache.PAGE,
                                   "MAXP": math.ceil(max_len / PagedCache.PAGE)}}
    assert hd == 128, "decode_attention's D is 128"

    stock_run = Runner(stock, a.batch, static_cache(stock, a.batch, max_len), graphs)
    ours_run = Runner(ours, a.batch, None if paged else static_cache(ours, a.batch, max_len), graphs)
    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.prefill), generator=gen).to(a.device)

    # Capture each decode graph in a throwaway run: the warm-up forwards before capture advance the position that
    # a newer StaticCache keeps on the device; every prefill after this resets it.
    for runner in (stock_run, ours_run):
        runner.generate(ids, 2)
    # Correctness: stock greedy, ours fed stock's tokens.
    stock_tokens, stock_logits, _ = stock_run.generate(ids, a.decode, keep=True)
    _, ours_logits, _ = ours_run.generate(ids, a.decode, forced=stock_tokens, keep=True)
    p_s, p_o = stock_run.prefill(ids).double(), ours_run.prefill(ids).double()
    prefill_rel = ((p_o - p_s).norm() / p_s.norm()).item()

    times = {"stock": [], "ours": []}
    for _ in range(a.runs):  # interleaved
        for name, runner in (("stock", stock_run), ("ours", ours_run)):
            sync()
            t0 = time.perf_counter()
            _, _, dec = runner.generate(ids, a.decode)
            times[name].append((time.perf_counter() - t0, dec))
    prefixes = [op.prefix for op in ops.values()]
    try:
        counts = profile_ours(ours_run, ids, min(a.decode, 8), prefixes, os.path.join(a.out_dir, "ours-trace.json.gz"))
    except Exception as e:  # the timings and the logits check stand without the profile
        counts = {}
        notes.append(f"profile FAILED: {type(e).__name__}: {str(e)[:200]}")

    def summary(t):
        dec = statistics.median(d for _, d in t)
        return {"total_s": statistics.median(x for x, _ in t), "decode_s": dec,
                "decode_tokens_per_s": a.batch * a.decode / dec, "runs": t}

    r = {"device": torch.cuda.get_device_name() if graphs else f"{a.device} (plumbing test, no GPU)",
         "model": f"LlamaForCausalLM random init, {'tiny config, fp32' if a.tiny else 'Llama-3-8B layer shapes, bf16'}, "
                  f"{a.layers} layers", "batch": a.batch, "prefill": a.prefill, "decode_steps": a.decode, "runs": a.runs,
         "graphs": "torch.cuda.graph capture of the decode step, both sides" if graphs else "off (CPU)",
         "torch": torch.__version__, "transformers": transformers.__version__,
         "ops": {n: {"prefix": op.prefix, "source": op.source, "dispatch": op.dispatch(shapes[n])} for n, op in ops.items()},
         "stock": summary(times["stock"]), "ours": summary(times["ours"]),
         "logits": diffs(ours_logits, stock_logits), "prefill_logits_rel_l2": prefill_rel,
         "profile_prefixed": counts, "notes": notes}
    r["logits"]["rel_tol"] = a.rel_tol if a.rel_tol is not None else (2e-2 if dtype == torch.bfloat16 else 1e-4)
    r["logits"]["agree"] = r["logits"]["rel_l2"] <= r["logits"]["rel_tol"]
    r["speedup_decode"] = r["ours"]["decode_tokens_per_s"] / r["stock"]["decode_tokens_per_s"]
    json.dump(r, open(os.path.join(a.out_dir, "swap-llama.json"), "w"), indent=2)
    md = table(r)
    open(os.path.join(a.out_dir, "swap-llama.md"), "w").write(md)
    print(md)
    return 0 if r["logits"]["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
