#!/usr/bin/env python3
"""Writes a GGUF of random bf16 weights with the shapes of a megaops preset, for llama.cpp's
llama-bench (bench/peers/llama_cpp/run.sh): the same architecture and sizes megaops and the PyTorch
peer time, so the three are compared on equal work. No checkpoint is read.

The tokenizer is llama.cpp's own vocabulary file of the family (models/ggml-vocab-llama-bpe.gguf
for Llama 3, ggml-vocab-qwen2.gguf for Qwen 3, from the llama-cpp-python source package that
scripts/fetch_text_deps.sh fetches); its tokenizer.* fields are copied. Weights are bf16 with
values of magnitude 2^-7..2^-6 and random signs (no NaN or Inf, never all zeros), norms 1.0 in
fp32; Llama 3's rope scaling tensor is left out (it changes numbers, not work). Tensors are
streamed to the file one at a time, so an 8B model needs about one tensor's memory.

  python3 bench/peers/llama_cpp/make_gguf.py --preset llama3.1-8b --vocab DIR/ggml-vocab-llama-bpe.gguf \\
      --out /tmp/llama3.1-8b-bf16.gguf
"""

import argparse
import os
import sys

import numpy as np
import gguf

# The megaops presets (src/models/model_config.cpp), as bench/peers/torch_prefill.py has them.
PRESETS = {
    "llama3.2-1b": dict(arch="llama", hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64,
                        inter=8192, vocab=128256, tied=True, rope_theta=500000.0, eps=1e-5,
                        context=131072),
    "llama3.1-8b": dict(arch="llama", hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128,
                        inter=14336, vocab=128256, tied=False, rope_theta=500000.0, eps=1e-5,
                        context=131072),
    "qwen3-0.6b": dict(arch="qwen3", hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128,
                       inter=3072, vocab=151936, tied=True, rope_theta=1000000.0, eps=1e-6,
                       context=40960),
    "qwen3-8b": dict(arch="qwen3", hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128,
                     inter=12288, vocab=151936, tied=False, rope_theta=1000000.0, eps=1e-6,
                     context=40960),
}


def tensor_specs(c):
    """(name, numpy shape [rows, cols] or [n], bf16?) of every tensor, in file order."""
    h, hd = c["hidden"], c["head_dim"]
    specs = [("token_embd.weight", (c["vocab"], h), True)]
    for i in range(c["layers"]):
        b = f"blk.{i}."
        specs += [(b + "attn_norm.weight", (h,), False),
                  (b + "attn_q.weight", (c["heads"] * hd, h), True),
                  (b + "attn_k.weight", (c["kv_heads"] * hd, h), True),
                  (b + "attn_v.weight", (c["kv_heads"] * hd, h), True),
                  (b + "attn_output.weight", (h, c["heads"] * hd), True)]
        if c["arch"] == "qwen3":
            specs += [(b + "attn_q_norm.weight", (hd,), False),
                      (b + "attn_k_norm.weight", (hd,), False)]
        specs += [(b + "ffn_norm.weight", (h,), False),
                  (b + "ffn_gate.weight", (c["inter"], h), True),
                  (b + "ffn_up.weight", (c["inter"], h), True),
                  (b + "ffn_down.weight", (h, c["inter"]), True)]
    specs.append(("output_norm.weight", (h,), False))
    if not c["tied"]:
        specs.append(("output.weight", (c["vocab"], h), True))
    return specs


def random_bf16(shape, rng):
    """bf16 bit patterns: random sign and mantissa, exponent 120 (|x| in [2^-7, 2^-6))."""
    bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
    return (bits & np.uint16(0x807F)) | np.uint16(120 << 7)


def copy_tokenizer(writer, vocab_path, n_vocab):
    """The vocabulary file's tokenizer.* fields, checked to hold n_vocab tokens."""
    reader = gguf.GGUFReader(vocab_path)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is None or len(tokens.data) != n_vocab:
        found = "none" if tokens is None else len(tokens.data)
        sys.exit(f"error: {vocab_path}: tokenizer.ggml.tokens: expected {n_vocab} tokens, "
                 f"found {found}")
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = gguf.GGUFValueType(field.types[0])
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, field.contents(), vtype, gguf.GGUFValueType(field.types[1]))
        else:
            writer.add_key_value(key, field.contents(), vtype)


def write_model(preset, vocab_path, out, seed):
    c = PRESETS[preset]
    arch = c["arch"]
    tmp = out + ".partial"
    w = gguf.GGUFWriter(tmp, arch)
    w.add_name(f"megaops random {preset}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_context_length(c["context"])
    w.add_embedding_length(c["hidden"])
    w.add_block_count(c["layers"])
    w.add_feed_forward_length(c["inter"])
    w.add_head_count(c["heads"])
    w.add_head_count_kv(c["kv_heads"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_rope_dimension_count(c["head_dim"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_vocab_size(c["vocab"])
    copy_tokenizer(w, vocab_path, c["vocab"])
    specs = tensor_specs(c)
    for name, shape, bf16 in specs:
        n = int(np.prod(shape))
        if bf16:
            w.add_tensor_info(name, shape, np.dtype(np.uint16), 2 * n,
                              raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * n)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, shape, bf16 in specs:
        w.write_tensor_data(random_bf16(shape, rng) if bf16 else np.ones(shape, np.float32))
    w.close()
    os.replace(tmp, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--vocab", required=True,
                    help="llama.cpp's vocabulary GGUF of the preset's family")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not os.path.isfile(a.vocab):
        sys.exit(f"error: --vocab: {a.vocab}: no such file")
    write_model(a.preset, a.vocab, a.out, a.seed)
    print(f"{a.out}: {os.path.getsize(a.out) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
