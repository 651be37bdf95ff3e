#!/usr/bin/env python3
"""Reference logits from HF transformers for `megaops check-logits`.

Loads a checkpoint directory (e.g. one written by `megaops init-random`) with transformers in
fp32 on the GPU, runs a seeded random prompt, then greedy decoding with the KV cache, and writes
prompt_ids [P], tokens [S] (the greedy token after each step) and step_logits [S, vocab] (step 0 is
the prompt's last position) as F32 tensors to a safetensors file. Then the same model in bf16 runs
the same tokens (teacher-forced on the fp32 run's greedy tokens) and its logits go beside them as
step_logits_bf16 [S, vocab]: how far the reference framework itself lands from fp32 at bf16, the
yardstick `check-logits` judges megaops' bf16 error against (bf16 error grows with depth, so no
fixed bound fits every model). Run where torch and transformers are installed (the GPU machine);
never at megaops run time.

  python3 scripts/hf_compare.py --model DIR --out expected.safetensors --prompt 32 --steps 65
"""
import argparse
import json
import sys

import torch
import transformers
from safetensors.torch import save_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--steps", type=int, default=65, help="logit rows: 1 prefill + decode steps")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(0, vocab, (1, args.prompt), generator=g)
    # Full-precision matmuls: the reference must not use TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tokens, rows = [], []
    with torch.no_grad():
        out = model(prompt.to(dev), use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1].float()
        for step in range(args.steps):
            rows.append(logits.cpu())
            tok = int(torch.argmax(logits))
            tokens.append(tok)
            if step + 1 == args.steps:
                break
            out = model(torch.tensor([[tok]], device=dev), past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
    # The same weights in bf16, fed the fp32 run's tokens: HF's own bf16 logits at every step.
    model = model.to(torch.bfloat16)
    rows_bf16 = []
    with torch.no_grad():
        out = model(prompt.to(dev), use_cache=True)
        past = out.past_key_values
        rows_bf16.append(out.logits[0, -1].float().cpu())
        for tok in tokens[:-1]:
            out = model(torch.tensor([[tok]], device=dev), past_key_values=past, use_cache=True)
            past = out.past_key_values
            rows_bf16.append(out.logits[0, -1].float().cpu())
    fp32 = torch.stack(rows).double()
    bf16 = torch.stack(rows_bf16).double()
    hf_bf16_err = ((bf16 - fp32).norm(dim=1) / fp32.norm(dim=1)).max().item()
    save_file({
        "prompt_ids": prompt[0].float().contiguous(),
        "tokens": torch.tensor(tokens, dtype=torch.float32),
        "step_logits": torch.stack(rows).contiguous(),
        "step_logits_bf16": torch.stack(rows_bf16).contiguous(),
    }, args.out)
    print(json.dumps({"model": args.model, "steps": args.steps, "torch": torch.__version__,
                      "transformers": transformers.__version__, "device": dev,
                      "hf_bf16_worst_rel_error": hf_bf16_err}))


if __name__ == "__main__":
    sys.exit(main())
