"""megaops: dense decoder LLM inference (Llama 3, Qwen 3) from Python.

    import megaops
    m = megaops.load("ckpt/")                      # weights, tokenizer, chat template
    prompt = m.apply_chat_template([{"role": "user", "content": "Hi"}])
    out = m.generate(prompt, max_new_tokens=32, on_text=print)
    logits = torch.from_dlpack(m.forward(m.encode("Hello")))

On the GPU (a build with CUDA), the step executor and the executor's kernels on CUDA tensors:

    ex = megaops.Executor("ckpt/", max_batch=2, max_seq=512)   # or a preset: "tiny-llama3"
    first = ex.prefill([ids_a, ids_b])                          # first token of each sequence
    nxt = ex.decode_step()                                      # or decode_step(forced=[...])
    logits = torch.from_dlpack(ex.logits())                     # [batch, vocab] on the GPU
    y = torch.from_dlpack(megaops.cuda_ops.matmul(x_bf16, w_bf16))
"""
from ._megaops import Executor, Model, cuda_ops, gpu_available, has_cuda, ops

__all__ = ["Executor", "Model", "chat", "cuda_ops", "gpu_available", "has_cuda", "load", "ops"]


def load(path, device="auto", max_context=4096, plan=""):
    """Loads a Hugging Face checkpoint directory; device is "auto", "cpu" or "cuda". On the GPU,
    generation runs `plan` (a megaops-plan JSON file, e.g. from `megaops plan --out`; default: the
    fastest measured plan for one sequence, as the CLI picks)."""
    return Model(path, device, max_context, plan)


def chat(model, messages, extra=None, **generate_options):
    """Renders `messages` with the checkpoint's chat template and generates the reply. The template
    writes the special tokens itself (BOS included), so the prompt is tokenized without adding
    any, as transformers' apply_chat_template(tokenize=True) does."""
    prompt = model.apply_chat_template(messages, True, extra)
    return model.generate(model.encode(prompt, add_special_tokens=False), **generate_options)
