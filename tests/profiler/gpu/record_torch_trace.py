#!/usr/bin/env python3
"""Records a PyTorch profiler (Kineto) trace of a small decoder-only transformer on the GPU: one prefill of
256 tokens and 32 greedy decode steps with a KV cache. Random weights built in torch (nothing downloaded).
usage: record_torch_trace.py OUT.json
The decode loop checks for an end token with .item() every step, as real generation loops do, so the trace
shows the host synchronizing once per token."""
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

D, HEADS, LAYERS, VOCAB, FF = 1024, 16, 6, 32000, 4096
PREFILL, DECODE = 256, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.up, self.down = nn.Linear(D, FF), nn.Linear(FF, D)

    def forward(self, x, cache):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        if cache:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        cache[:] = [k, v]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=(t > 1))
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids, caches):
        x = self.emb(ids)
        for blk, c in zip(self.blocks, caches):
            x = blk(x, c)
        return self.head(self.ln(x[:, -1:]))


@torch.no_grad()
def generate(model, prompt, steps, annotate):
    caches = [[] for _ in range(LAYERS)]
    ctx = torch.profiler.record_function if annotate else (lambda name: torch.autograd.profiler.record_function(name))
    with ctx("prefill"):
        tok = model(prompt, caches).argmax(-1)
    out = [tok]
    for _ in range(steps):
        with ctx("decode_step"):
            tok = model(tok, caches).argmax(-1)
            if tok.item() == -1:  # end-of-sequence check: one host sync per token
                break
        out.append(tok)
    return torch.cat(out, dim=1)


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    model = Model().cuda().to(torch.bfloat16).eval()
    prompt = torch.randint(0, VOCAB, (1, PREFILL), device="cuda")
    generate(model, prompt, 4, False)  # warm up: cuBLAS handles, kernel selection
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        t0 = time.perf_counter()
        generate(model, prompt, DECODE, True)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    prof.export_chrome_trace(out)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: prefill {PREFILL} + decode {DECODE}, "
          f"{LAYERS} layers d={D}; wall {wall * 1e3:.1f} ms (profiled) -> {out}")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))


if __name__ == "__main__":
    main()
