#!/usr/bin/env python3
"""Generates the Hugging Face reference fixtures the fp32 CPU oracle is tested against.

For each tiny model (a Llama 3 with GQA and llama3 RoPE scaling, a Qwen 3 with q/k norms, tied
embeddings and head_dim != hidden / heads) it builds a seeded random model with transformers,
saves it as an HF checkpoint directory, runs a fixed 12-token prompt through it (fp32, eager
attention, CPU), then 6 greedy decode steps through the KV cache, and stores the prompt, the
prefill logits, the decoded ids and each decode step's logits in expected.safetensors.

Ids are stored as F32 values because megaops' safetensors reader supports F32/F16/BF16 only
(every id < 256 is exact in fp32).

Run where torch and transformers are installed:
    python scripts/make_fixtures.py [--out tests/fixtures]
"""

import argparse
import inspect
import os
import platform
import shutil

import safetensors
import safetensors.torch
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

PROMPT = [1, 17, 200, 43, 99, 5, 128, 255, 0, 64, 31, 77]
DECODE_STEPS = 6
# Weights std: large enough that logits and attention are far from flat, so a wrong op (a rope
# off by one position, a missing norm) moves the logits well past the 1e-4 tolerance.
WEIGHT_STD = 0.1
NORM_NOISE_STD = 0.1


def tiny_llama3():
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        # head_dim 16, theta 5e5: the pair wavelengths are 6.3, 32, 167, ... tokens. With an
        # original context of 64 (low/high wavelength cut-offs 64 and 16) one pair stays as is, one
        # is smoothed and the rest are divided by the factor: all three llama3 branches are used.
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    return cfg, LlamaForCausalLM, None


def tiny_qwen3():
    cfg = Qwen3Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # != hidden / heads = 16, on purpose
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
        use_sliding_window=False,
        sliding_window=None,
        bos_token_id=1,
        eos_token_id=2,
    )
    # Sharded so the loader's model.safetensors.index.json path is exercised.
    return cfg, Qwen3ForCausalLM, "100KB"


MODELS = {"tiny-llama3": tiny_llama3, "tiny-qwen3": tiny_qwen3}


def randomise(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + NORM_NOISE_STD * noise)
            else:
                p.copy_(WEIGHT_STD * noise)


def generate_reference(model):
    # transformers 5.2x renamed `past_key_values` to `cache` (argument and output field); accept both
    # so the script runs on either side of the rename.
    new_api = "cache" in inspect.signature(model.forward).parameters
    cache_arg = "cache" if new_api else "past_key_values"

    def step(ids, cache):
        kwargs = {"input_ids": torch.tensor([ids], dtype=torch.long), "use_cache": True}
        if cache is not None:
            kwargs[cache_arg] = cache
        out = model(**kwargs)
        return out.logits[0].float().clone(), getattr(out, cache_arg)

    with torch.no_grad():
        prefill_logits, cache = step(PROMPT, None)
        next_id = int(prefill_logits[-1].argmax())
        decode_ids, decode_logits = [], []
        for _ in range(DECODE_STEPS):
            decode_ids.append(next_id)
            logits, cache = step([next_id], cache)
            decode_logits.append(logits[-1])
            next_id = int(logits[-1].argmax())
    return {
        "prompt_ids": torch.tensor(PROMPT, dtype=torch.float32),
        "prefill_logits": prefill_logits.contiguous(),
        "decode_ids": torch.tensor(decode_ids, dtype=torch.float32),
        "decode_logits": torch.stack(decode_logits).contiguous(),
    }


def top2_gap(logits):
    top = torch.topk(logits, 2, dim=-1).values
    return float((top[..., 0] - top[..., 1]).min())


def make(name, out_dir, seed):
    cfg, cls, shard = MODELS[name]()
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(cfg).to(torch.float32).eval()
    randomise(model, seed)

    target = os.path.join(out_dir, name)
    if os.path.isdir(target):
        shutil.rmtree(target)
    os.makedirs(target)
    save_kwargs = {}
    if shard is not None:
        save_kwargs["max_shard_size"] = shard
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        save_kwargs["safe_serialization"] = True
    model.save_pretrained(target, **save_kwargs)

    ref = generate_reference(model)
    safetensors.torch.save_file(
        ref, os.path.join(target, "expected.safetensors"), metadata={"format": "pt"}
    )

    files = sorted(os.listdir(target))
    size = sum(os.path.getsize(os.path.join(target, f)) for f in files)
    print(
        f"{name}: {len(files)} files, {size / 1024:.0f} KiB, decode ids "
        f"{[int(i) for i in ref['decode_ids']]}, smallest top-2 logit gap "
        f"{min(top2_gap(ref['prefill_logits']), top2_gap(ref['decode_logits'])):.4f}, "
        f"logit std {float(ref['prefill_logits'].std()):.3f}"
    )
    return files, size


README = """# Reference fixtures from Hugging Face transformers

Generated by `scripts/make_fixtures.py` (do not edit by hand; rerun the script instead), with

{versions}

Each directory is a tiny random model saved by `save_pretrained` (fp32 safetensors, config.json as
transformers writes it) plus `expected.safetensors`, computed by transformers on CPU in fp32 with
eager attention:

| tensor | shape | meaning |
| --- | --- | --- |
| `prompt_ids` | [12] | the prompt, ids stored as F32 (the reader supports F32/F16/BF16 only) |
| `prefill_logits` | [12, vocab] | logits of every prompt position |
| `decode_ids` | [6] | greedy tokens fed one at a time after the prompt, F32 |
| `decode_logits` | [6, vocab] | logits after feeding each decode id, through the KV cache |

`decode_ids[0]` is the argmax of the last prefill row; `decode_ids[i]` the argmax of
`decode_logits[i - 1]`.

Models (weights ~ N(0, {std}), norm weights 1 + N(0, {norm_std}), seed {seed}):

- `tiny-llama3`: Llama 3, vocab 256, hidden 64, intermediate 160, 3 layers, 4 heads, 2 kv heads
  (GQA), head_dim 16, rope_theta 5e5 with llama3 scaling (factor 8, low/high freq factors 1/4,
  original context 64, so all three branches of the scaling are used), untied lm_head, eps 1e-5.
- `tiny-qwen3`: Qwen 3, vocab 256, hidden 64, intermediate 128, 2 layers, 4 heads, 2 kv heads,
  head_dim 32 (not hidden / heads), q/k norms, tied embeddings, rope_theta 1e6, eps 1e-6, saved in
  100 KB shards with model.safetensors.index.json.

Sizes: {sizes}.

`tests/reference/hf_fixture_test.cpp` runs the megaops fp32 oracle on each and requires a relative
error ||out - ref|| / ||ref|| <= 1e-4 per logits row.
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures"))
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)  # deterministic reductions, and the machines are shared

    versions = (
        f"- torch {torch.__version__}\n- transformers {transformers.__version__}\n"
        f"- safetensors {safetensors.__version__}\n- python {platform.python_version()}"
    )
    print(versions)
    sizes = []
    for i, name in enumerate(MODELS):
        files, size = make(name, out_dir, args.seed + i)
        sizes.append(f"{name} {size / 1024:.0f} KiB ({len(files)} files)")

    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(
            README.format(
                versions=versions,
                std=WEIGHT_STD,
                norm_std=NORM_NOISE_STD,
                seed=f"{args.seed} + model index",
                sizes=", ".join(sizes),
            )
        )


if __name__ == "__main__":
    main()
