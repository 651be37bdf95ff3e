#!/usr/bin/env python3
"""Writes a random-weight checkpoint with Hugging Face transformers' own save_pretrained: HF's
initialiser, HF's config.json and HF's sharding, so megaops' loader and accuracy are checked on
files it did not write itself, on architectures deeper than its presets.

  python3 scripts/hf_write_checkpoint.py --arch llama3.2-3b --out DIR [--seed 0]

Architectures (the published configs of these sizes; random weights, no download):
  llama3.2-3b  28 layers, hidden 3072, 24 heads / 8 kv, llama3 rope scaling, tied embeddings
  qwen3-4b     36 layers, hidden 2560, 32 heads / 8 kv, head_dim 128, q/k norms, tied embeddings
Run where torch and transformers are installed (the GPU machine); never at megaops run time.
"""
import argparse
import json
import sys

import torch
import transformers

ARCHS = {
    "llama3.2-3b": lambda: transformers.LlamaConfig(
        vocab_size=128256, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
        num_attention_heads=24, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        tie_word_embeddings=True, bos_token_id=128000, eos_token_id=[128001, 128008, 128009]),
    "qwen3-4b": lambda: transformers.Qwen3Config(
        vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True, choices=sorted(ARCHS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    cfg = ARCHS[args.arch]()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(dev):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(args.out, max_shard_size="2GB", safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"arch": args.arch, "out": args.out, "params": params,
                      "layers": cfg.num_hidden_layers, "transformers": transformers.__version__}))


if __name__ == "__main__":
    sys.exit(main())
