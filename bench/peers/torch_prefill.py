#!/usr/bin/env python3
"""PyTorch peer for megaops' prefill (time to first token), run in the same device call as
`megaops bench-attention` and `megaops bench-matmul --prefill-tokens` so the ratios are measured on
one GPU in one session.

Three figures, all with random bf16 weights of the real architectures (no checkpoint is read):
  ttft   eager prefill of one prompt: embedding, per layer RMSNorm -> fused QKV matmul -> (Qwen 3:
         q/k RMSNorm) -> RoPE -> scaled_dot_product_attention(is_causal=True) -> O matmul +
         residual -> RMSNorm -> gate_up matmul -> SiLU * up -> down matmul + residual; final norm
         and the LM head on the last token (the only row the first token needs). Matmuls are
         cuBLAS (torch's default); every layer has its own weights.
  sdpa   scaled_dot_product_attention alone at the attention benchmark's shapes (one sequence, T
         tokens, the model's heads), GQA through enable_gqa=True and with K / V expanded to all
         heads beforehand (what HF's repeat_kv does), TFLOP/s with causal FLOPs 4 * T^2 * H * d / 2.
  gemm   torch.matmul bf16 N^3, the tensor-core ceiling in this process.
Timing: CUDA events around each run, warm-up runs first, median of --repeats (>= 3).

  python3 bench/peers/torch_prefill.py --json out/torch_prefill.json
"""

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

# The megaops presets (src/models/model_config.cpp).
PRESETS = {
    "llama3.2-1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64, inter=8192,
                        vocab=128256, qk_norm=False, rope_theta=500000.0, eps=1e-5),
    "llama3.1-8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128, inter=14336,
                        vocab=128256, qk_norm=False, rope_theta=500000.0, eps=1e-5),
    "qwen3-0.6b": dict(hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, inter=3072,
                       vocab=151936, qk_norm=True, rope_theta=1000000.0, eps=1e-6),
    "qwen3-8b": dict(hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128, inter=12288,
                     vocab=151936, qk_norm=True, rope_theta=1000000.0, eps=1e-6),
}


def time_ms(fn, warmup, repeats):
    """Median, min and max milliseconds of fn() over `repeats` event-timed runs."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times), min(times), max(times)


def rand(*shape, scale=1.0):
    # Uniform in [-scale, scale): never zeros (a GEMM on zeros runs faster than on real data).
    return (torch.rand(*shape, device="cuda", dtype=torch.bfloat16) * 2 - 1) * scale


class RandomModel:
    """Random bf16 weights of one architecture, scaled so activations stay O(1)."""

    def __init__(self, c):
        self.c = c
        h, d = c["hidden"], c["head_dim"]
        qkv = (c["heads"] + 2 * c["kv_heads"]) * d
        self.embed = rand(c["vocab"], h)
        self.layers = []
        for _ in range(c["layers"]):
            self.layers.append(dict(
                ln1=1 + rand(h, scale=0.1), ln2=1 + rand(h, scale=0.1),
                wqkv=rand(qkv, h, scale=1 / math.sqrt(h)),
                wo=rand(h, c["heads"] * d, scale=1 / math.sqrt(c["heads"] * d)),
                wgu=rand(2 * c["inter"], h, scale=1 / math.sqrt(h)),
                wd=rand(h, c["inter"], scale=1 / math.sqrt(c["inter"])),
                qn=1 + rand(d, scale=0.1) if c["qk_norm"] else None,
                kn=1 + rand(d, scale=0.1) if c["qk_norm"] else None))
        self.norm = 1 + rand(h, scale=0.1)
        self.lm_head = rand(c["vocab"], h, scale=1 / math.sqrt(h))

    def rope(self, t):
        d = self.c["head_dim"]
        inv = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, d, 2, device="cuda").float() / d))
        f = torch.outer(torch.arange(t, device="cuda").float(), inv)
        emb = torch.cat([f, f], dim=-1)
        return emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)

    @staticmethod
    def rotate(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def prefill(self, ids, cos, sin, gqa_native):
        c = self.c
        t, hq, hk, d, eps = ids.numel(), c["heads"], c["kv_heads"], c["head_dim"], c["eps"]
        x = self.embed[ids]
        for L in self.layers:
            h = F.rms_norm(x, (c["hidden"],), L["ln1"], eps)
            qkv = h @ L["wqkv"].t()
            q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
            q, k, v = q.view(t, hq, d), k.view(t, hk, d), v.view(t, hk, d)
            if c["qk_norm"]:
                q = F.rms_norm(q, (d,), L["qn"], eps)
                k = F.rms_norm(k, (d,), L["kn"], eps)
            q = self.rotate(q, cos[:, None], sin[:, None]).transpose(0, 1)[None]
            k = self.rotate(k, cos[:, None], sin[:, None]).transpose(0, 1)[None]
            v = v.transpose(0, 1)[None]
            if gqa_native:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                k = k.repeat_interleave(hq // hk, dim=1)
                v = v.repeat_interleave(hq // hk, dim=1)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + a[0].transpose(0, 1).reshape(t, hq * d) @ L["wo"].t()
            h = F.rms_norm(x, (c["hidden"],), L["ln2"], eps)
            g, u = (h @ L["wgu"].t()).chunk(2, dim=-1)
            x = x + (F.silu(g) * u) @ L["wd"].t()
        last = F.rms_norm(x[-1:], (c["hidden"],), self.norm, eps)
        return (last @ self.lm_head.t()).argmax(-1)


def sdpa_rows(presets, tokens, warmup, repeats, ceiling):
    rows = []
    for name in presets:
        c = PRESETS[name]
        hq, hk, d = c["heads"], c["kv_heads"], c["head_dim"]
        for t in tokens:
            q = rand(1, hq, t, d, scale=2.0)
            k = rand(1, hk, t, d)
            v = rand(1, hk, t, d)
            kx = k.repeat_interleave(hq // hk, dim=1)
            vx = v.repeat_interleave(hq // hk, dim=1)
            flops = 4.0 * t * t * hq * d / 2
            variants = {
                "sdpa-gqa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                   enable_gqa=True),
                "sdpa-expanded": lambda: F.scaled_dot_product_attention(q, kx, vx,
                                                                        is_causal=True),
            }
            for kind, fn in variants.items():
                try:
                    ms, lo, hi = time_ms(fn, warmup, repeats)
                except RuntimeError as e:  # a backend that refuses the shape
                    rows.append(dict(kind=kind, preset=name, tokens=t, error=str(e)[:200]))
                    continue
                tf = flops / (ms * 1e-3) / 1e12
                rows.append(dict(kind=kind, preset=name, tokens=t, heads=hq, kv_heads=hk,
                                 head_dim=d, ms=ms, ms_min=lo, ms_max=hi, tflops=tf,
                                 pct_ceiling=100 * tf / ceiling))
                print(f"{kind:14s} {name:12s} T={t:6d} {ms:9.3f} ms {tf:7.1f} TFLOP/s "
                      f"{100 * tf / ceiling:5.1f}%", flush=True)
            del q, k, v, kx, vx
    return rows


def ttft_rows(presets, tokens, warmup, repeats, gqa_native):
    rows = []
    for name in presets:
        c = PRESETS[name]
        t0 = time.time()
        model = RandomModel(c)
        torch.cuda.synchronize()
        print(f"{name}: random weights in {time.time() - t0:.1f} s", flush=True)
        for t in tokens:
            ids = torch.randint(0, c["vocab"], (t,), device="cuda")
            cos, sin = model.rope(t)
            ms, lo, hi = time_ms(lambda: model.prefill(ids, cos, sin, gqa_native), warmup,
                                 repeats)
            rows.append(dict(kind="ttft", preset=name, tokens=t, ms=ms, ms_min=lo, ms_max=hi,
                             gqa="enable_gqa" if gqa_native else "repeat_interleave"))
            print(f"ttft           {name:12s} T={t:6d} {ms:9.3f} ms", flush=True)
        del model
        torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="llama3.2-1b,llama3.1-8b")
    ap.add_argument("--ttft-tokens", default="512,2048,4096")
    ap.add_argument("--sdpa-tokens", default="1024,4096,16384")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ceiling-n", type=int, default=8192)
    ap.add_argument("--gqa", choices=["native", "repeat"], default="native",
                    help="the TTFT model's GQA: enable_gqa=True, or K / V expanded (HF repeat_kv)")
    ap.add_argument("--skip", default="", help="comma-separated: ttft, sdpa")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.repeats < 3:
        ap.error("--repeats must be >= 3")
    presets = [p for p in a.presets.split(",") if p]
    for p in presets:
        if p not in PRESETS:
            ap.error(f"unknown preset {p}; known: {', '.join(PRESETS)}")
    skip = set(a.skip.split(","))
    torch.manual_seed(0)
    with torch.inference_mode():
        n = a.ceiling_n
        x, y = rand(n, n), rand(n, n)
        ms, _, _ = time_ms(lambda: x @ y, 3, 10)
        ceiling = 2.0 * n ** 3 / (ms * 1e-3) / 1e12
        del x, y
        print(f"torch bf16 matmul {n}^3: {ceiling:.1f} TFLOP/s", flush=True)
        rows = []
        if "sdpa" not in skip:
            rows += sdpa_rows(presets, [int(t) for t in a.sdpa_tokens.split(",") if t],
                              a.warmup, a.repeats, ceiling)
        if "ttft" not in skip:
            rows += ttft_rows(presets, [int(t) for t in a.ttft_tokens.split(",") if t],
                              a.warmup, a.repeats, a.gqa == "native")
    out = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
               cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
               date_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               gemm_ceiling_n=n, gemm_ceiling_tflops=ceiling,
               causal_flops="4 * T^2 * H * d / 2", rows=rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
