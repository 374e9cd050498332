#!/usr/bin/env python3
"""PyTorch peers of the `llama_decoder_decode` pipeline (issue 19): one Llama-3-8B decoder layer's decode step.

The step is Hugging Face's LlamaDecoderLayer's own modules (RMSNorm, q/k/v/o projections, rotary, MLP) around
SDPA over a static KV cache of --context positions: RMSNorm, QKV GEMMs, rotary, cache write at `pos`, decode
attention, O-projection + residual, RMSNorm, gate/up GEMMs, act_fn(gate) * up, down GEMM + residual. Timed at
batch 1, 16, 64 as PyTorch eager, torch.compile (default mode, inductor) and the eager step captured in one CUDA
graph (torch.cuda.graph). The KernelLoop columns come from `kloop pipeline run llama_decoder_decode --out R.json`
(--pipeline-result R.json), matched by batch (the pipeline's T or B); without one they stay empty.

FLOPs and bytes per step (bf16, B batch, L = context attended incl. the new token, H hidden, I intermediate,
HQ/HKV heads, D head dim), the pipeline's formulas as this script counts them:
  flops = 2*B*H*(HQ + 2*HKV)*D + 2*B*HQ*D*H + 2*B*H*2*I + 2*B*I*H      (GEMMs)
        + 4*B*HQ*L*D                                                   (attention: QK^T and PV)
          (norms, rotary, silu, softmax: elementwise, not counted)
  bytes = 2*(H*(HQ + 2*HKV)*D + HQ*D*H + 3*H*I + 2*H)                   (weights incl. the two norm weights)
        + 2*2*B*L*HKV*D + 2*2*B*HKV*D                                  (K and V read over L, the new K/V written)
        + 2*2*B*H                                                      (hidden in, hidden out; intermediates not counted)
MFU = flops / time / peak bf16 FLOP/s; MBU = bytes / time / peak copy bandwidth. Peaks (H200, measured): the
PEAKS below, from /work/shared/measurements/anchors-h200.json (copy_TBps; gemm_4096x4096x4096_TFLOPs, cuBLAS);
--peaks FILE reads those keys from another anchors file.

    decoder_layer_peers.py --out-dir DIR [--pipeline-result R.json] [--context 4096]
    decoder_layer_peers.py --device cpu --tiny --out-dir DIR     # plumbing test: tiny config, fp32, no graphs
Writes DIR/decoder-layer-peers.json and DIR/decoder-layer-peers.md.
"""
import argparse
import inspect
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_trace import llama_config  # noqa: E402

from transformers.models.llama import modeling_llama  # noqa: E402

PEAKS = {"flops_per_s": 709.0915381456928e12, "bytes_per_s": 4.272748880392595e12,
         "source": "/work/shared/measurements/anchors-h200.json (H200: copy_TBps 4.27; cuBLAS bf16 "
                   "gemm_4096x4096x4096 709 TFLOP/s)"}


def peaks_from(path):
    a = json.load(open(path))
    tflops = max(v for k, v in a.items() if k.startswith("gemm_") and k.endswith("_TFLOPs"))
    return {"flops_per_s": tflops * 1e12, "bytes_per_s": a["copy_TBps"] * 1e12,
            "source": f"{path} (copy_TBps, best gemm_*_TFLOPs)"}


def work(cfg, b, length):
    h, i, hq, hkv = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads
    d = h // hq
    flops = 2 * b * h * (hq + 2 * hkv) * d + 2 * b * hq * d * h + 2 * b * h * 2 * i + 2 * b * i * h \
        + 4 * b * hq * length * d
    nbytes = 2 * (h * (hq + 2 * hkv) * d + hq * d * h + 3 * h * i + 2 * h) + 2 * 2 * b * length * hkv * d \
        + 2 * 2 * b * hkv * d + 2 * 2 * b * h
    return flops, nbytes


class DecodeStep(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layer = modeling_llama.LlamaDecoderLayer(cfg, layer_idx=0)
        self.rotary = modeling_llama.LlamaRotaryEmbedding(config=cfg)

    def forward(self, x, pos, kc, vc):
        b = x.shape[0]
        a, d = self.layer.self_attn, self.layer.self_attn.head_dim
        h = self.layer.input_layernorm(x)
        q = a.q_proj(h).view(b, 1, -1, d).transpose(1, 2)
        k = a.k_proj(h).view(b, 1, -1, d).transpose(1, 2)
        v = a.v_proj(h).view(b, 1, -1, d).transpose(1, 2)
        cos, sin = self.rotary(x, pos.view(1, 1).expand(b, 1))
        q, k = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, v)
        valid = (torch.arange(kc.shape[2], device=x.device) <= pos).view(1, 1, 1, -1)
        o = F.scaled_dot_product_attention(q, kc, vc, attn_mask=valid, scale=a.scaling, enable_gqa=True)
        x = x + a.o_proj(o.transpose(1, 2).reshape(b, 1, -1))
        return x + self.layer.mlp(self.layer.post_attention_layernorm(x))


def check_against_hf(step, x, pos, kc, vc):
    """rel-l2 of the step against HF's own LlamaDecoderLayer.forward, fed the same cache through a DynamicCache:
    the peer is the layer, not a re-implementation of it."""
    import transformers
    kc0, vc0 = kc.clone(), vc.clone()
    out = step(x, pos, kc0, vc0).float()
    cache = transformers.DynamicCache()
    cache.update(kc0[:, :, :-1].clone(), vc0[:, :, :-1].clone(), 0)
    position_ids = pos.view(1, 1).expand(x.shape[0], 1)
    name = "cache" if "cache" in inspect.signature(modeling_llama.LlamaDecoderLayer.forward).parameters \
        else "past_key_values"
    hf = step.layer(x, attention_mask=None, position_ids=position_ids, use_cache=True,
                    position_embeddings=step.rotary(x, position_ids), **{name: cache})
    hf = (hf[0] if isinstance(hf, tuple) else hf).float()
    return ((out - hf).norm() / hf.norm()).item()


def timer(fn, iters, cuda):
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def graphed(step, args):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(*args)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step(*args)
    return g.replay


def pipeline_rows(path):
    """Per batch: the pipeline result's graph/eager medians (us), MFU, MBU and its dims (kloop pipeline run --out)."""
    if not path:
        return {}
    r = json.load(open(path))
    rows = {}
    for s in r.get("shapes", []):
        dims = s.get("shape", {}).get("dims", {})
        batch = dims.get("T", dims.get("B"))
        if batch is not None:
            rows[int(batch)] = {"graph_us": s.get("graph", {}).get("median_us"),
                                "eager_us": s.get("eager", {}).get("median_us"), "mfu": s.get("mfu"),
                                "mbu": s.get("mbu"), "dims": dims, "accepted": r.get("accepted")}
    return rows


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def table(r):
    lines = [f"# llama decoder layer decode step: PyTorch peers ({r['device']})", "",
             f"- one Llama-3-8B decoder layer{' (TINY config)' if r['tiny'] else ''}, context {r['context']}, "
             f"{r['dtype']}; torch {r['torch']}; peaks: {r['peaks']['source']}",
             f"- KernelLoop: {r['pipeline_result'] or 'no --pipeline-result given (columns empty)'}", "",
             "| B | eager us | compile us | graph us | KernelLoop graph us | KernelLoop eager us | "
             "MFU eager/compile/graph/KL | MBU eager/compile/graph/KL |", "|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        kl = row.get("kernelloop") or {}
        kinds = ("eager", "compile", "graph")
        mfu = "/".join(fmt(row[k + "_mfu"], ".1%") or "-" for k in kinds) + "/" + (fmt(kl.get("mfu"), ".1%") or "-")
        mbu = "/".join(fmt(row[k + "_mbu"], ".1%") or "-" for k in kinds) + "/" + (fmt(kl.get("mbu"), ".1%") or "-")
        lines.append(f"| {row['batch']} | {fmt(row['eager_us'], '.1f')} | {fmt(row['compile_us'], '.1f')} | "
                     f"{fmt(row['graph_us'], '.1f')} | {fmt(kl.get('graph_us'), '.1f')} | "
                     f"{fmt(kl.get('eager_us'), '.1f')} | {mfu} | {mbu} |")
    lines += ["", "FLOPs and bytes per step: the formulas in bench/model/decoder_layer_peers.py's header. The step "
              "against HF's LlamaDecoderLayer.forward on the same cache, rel-l2: "
              + ", ".join(f"B={row['batch']} {row['rel_l2_vs_hf_layer']:.2g}" for row in r["rows"]) + "."]
    lines += [f"- {n}" for n in r["notes"]]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny config, fp32, no graphs: CPU plumbing test")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--context", type=int, default=4096, help="KV positions attended (incl. the new token)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--peaks", help="an anchors JSON (copy_TBps, gemm_*_TFLOPs) instead of the built-in H200 peaks")
    ap.add_argument("--pipeline-result", help="kloop pipeline run llama_decoder_decode --out JSON")
    a = ap.parse_args()
    cuda = a.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    if a.tiny:
        a.context, a.iters = min(a.context, 256), min(a.iters, 5)
    os.makedirs(a.out_dir, exist_ok=True)
    cfg = llama_config(1, a.tiny)
    peaks = peaks_from(a.peaks) if a.peaks else PEAKS
    kl_rows = pipeline_rows(a.pipeline_result)
    torch.manual_seed(0)
    step = DecodeStep(cfg).to(a.device, dtype).eval()
    compiled = None if a.no_compile else torch.compile(step)
    notes = [] if cuda else ["CPU plumbing test: no CUDA graph; MFU/MBU against H200 peaks are meaningless here"]
    rows = []
    with torch.inference_mode():
        for b in [int(x) for x in a.batches.split(",")]:
            d, hkv = cfg.hidden_size // cfg.num_attention_heads, cfg.num_key_value_heads
            kc = torch.randn(b, hkv, a.context, d, device=a.device, dtype=dtype)
            vc = torch.randn(b, hkv, a.context, d, device=a.device, dtype=dtype)
            x = torch.randn(b, 1, cfg.hidden_size, device=a.device, dtype=dtype)
            pos = torch.tensor([a.context - 1], device=a.device)
            args = (x, pos, kc, vc)
            ref = step(*args).float()
            row_check = check_against_hf(step, *args)
            row = {"batch": b, "rel_l2_vs_hf_layer": row_check, "eager_us": timer(lambda: step(*args), a.iters, cuda)}
            if row_check > (2e-2 if cuda else 1e-4):
                notes.append(f"B={b}: the step DIFFERS from HF's LlamaDecoderLayer (rel-l2 {row_check:.3g})")
            row["compile_us"] = None
            if compiled is not None:
                err = ((compiled(*args).float() - ref).norm() / ref.norm()).item()
                row["compile_rel_l2_vs_eager"] = err
                row["compile_us"] = timer(lambda: compiled(*args), a.iters, cuda)
            row["graph_us"] = timer(graphed(step, args), a.iters, cuda) if cuda else None
            flops, nbytes = work(cfg, b, a.context)
            row.update({"flops": flops, "bytes": nbytes})
            for k in ("eager", "compile", "graph"):
                us = row[k + "_us"]
                row[k + "_mfu"] = flops / (us * 1e-6) / peaks["flops_per_s"] if us else None
                row[k + "_mbu"] = nbytes / (us * 1e-6) / peaks["bytes_per_s"] if us else None
            kl = kl_rows.get(b)
            row["kernelloop"] = kl
            if kl:
                dims = kl["dims"]
                if "MAXP" in dims and "PS" in dims and dims["MAXP"] * dims["PS"] != a.context:
                    notes.append(f"B={b}: the pipeline's context MAXP*PS = {dims['MAXP'] * dims['PS']} differs from "
                                 f"--context {a.context}")
            rows.append(row)
            print(f"B={b}: eager {row['eager_us']:.1f} us, compile {fmt(row['compile_us'], '.1f') or '-'} us, "
                  f"graph {fmt(row['graph_us'], '.1f') or '-'} us", file=sys.stderr)
    r = {"device": torch.cuda.get_device_name() if cuda else f"{a.device} (plumbing test, no GPU)", "tiny": a.tiny,
         "context": a.context, "dtype": str(dtype).replace("torch.", ""), "torch": torch.__version__, "peaks": peaks,
         "pipeline_result": a.pipeline_result, "rows": rows, "notes": notes}
    json.dump(r, open(os.path.join(a.out_dir, "decoder-layer-peers.json"), "w"), indent=2)
    md = table(r)
    open(os.path.join(a.out_dir, "decoder-layer-peers.md"), "w").write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
