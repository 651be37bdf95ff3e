"""The module's GPU side against the CLI, the fp32 CPU oracle and PyTorch: megaops.Executor's greedy
tokens equal `megaops generate`'s on the GPU for the same random-weight checkpoint (init-random) and
prompt, and megaops.LLM's on the GPU equal the Executor's; its logits come back as a CUDA tensor
(copied on the GPU, no host round trip) whose argmax is the token and which matches the CPU
oracle's logits; megaops.cuda_ops' kernels agree with PyTorch references on fresh random inputs
(tolerances next to each assert). megaops.LLM's batching, per-request sampling and streaming run on
the GPU in test_llm.py (each of its tests on both devices). Skipped without
PyTorch, without a CUDA device, or with a module built without CUDA; on such a machine the
Executor's constructor must raise its one error, which the last test checks."""
import subprocess

import numpy as np
import pytest

import megaops
from conftest import CLI


try:
    import torch
    HAVE_TORCH_CUDA = torch.cuda.is_available()
except ImportError:
    torch = None
    HAVE_TORCH_CUDA = False

needs_gpu = pytest.mark.skipif(
    not (HAVE_TORCH_CUDA and megaops.has_cuda),
    reason="needs PyTorch with a CUDA device and a megaops module built with CUDA "
           f"(torch: {'cuda' if HAVE_TORCH_CUDA else 'absent or no CUDA'}, "
           f"megaops.has_cuda: {megaops.has_cuda})")

PROMPT = [1, 17, 256, 3, 99, 100, 42, 7, 511, 64, 5]  # the tiny presets' vocabulary is 512


@needs_gpu
def test_executor_greedy_tokens_match_cli(ckpt):
    new = 12
    cli_tokens = [int(x) for x in subprocess.run(
        [CLI, "generate", "--model", ckpt, "--prompt-ids", ",".join(map(str, PROMPT)),
         "--max-new-tokens", str(new), "--ignore-eos"],
        check=True, capture_output=True).stdout.decode().split()]
    # The CLI's executor: batch 1, the context the run needs, the default plan for batch 1.
    ex = megaops.Executor(ckpt, max_batch=1, max_seq=len(PROMPT) + new)
    assert ex.plan
    tokens = ex.prefill([PROMPT])
    for _ in range(new - 1):
        tokens += ex.decode_step()
    assert tokens == cli_tokens


@needs_gpu
def test_logits_are_a_cuda_tensor_whose_argmax_is_the_token(ckpt):
    ex = megaops.Executor(ckpt, max_batch=2, max_seq=64)
    first = ex.prefill([PROMPT, PROMPT[:5]])
    logits = torch.from_dlpack(ex.logits())
    assert logits.is_cuda and logits.dtype == torch.float32
    assert tuple(logits.shape) == (2, ex.vocab_size)
    assert logits.argmax(dim=1).tolist() == first
    # Forced tokens as a CUDA int32 tensor, as a list: the same step.
    forced = torch.tensor([5, 9], dtype=torch.int32, device="cuda")
    step = ex.decode_step(forced)
    assert torch.from_dlpack(ex.logits()).argmax(dim=1).tolist() == step
    ex.prefill([PROMPT, PROMPT[:5]])  # a new batch: the same step with the ids as a list
    assert ex.decode_step([5, 9]) == step
    # logits() returns a copy that owns its memory: later steps leave it as it was.
    held = torch.from_dlpack(ex.logits())
    kept = held.clone()
    ex.decode_step()
    assert torch.equal(held, kept)


def rel_l2(got, want):
    """Relative L2 error, as the C++ executor-vs-oracle tests measure it (gpu_test_util.h)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@needs_gpu
def test_logits_match_the_cpu_oracle(ckpt):
    prompts = [PROMPT, PROMPT[:5]]
    ex = megaops.Executor(ckpt, max_batch=2, max_seq=64)
    ex.prefill(prompts)
    oracles = [megaops.load(ckpt, device="cpu", max_context=64) for _ in prompts]
    want = [m.forward(p)[-1] for m, p in zip(oracles, prompts)]
    for step, forced in enumerate([None, [5, 9], [300, 2]]):
        if forced is not None:
            ex.decode_step(forced)
            want = [m.forward([t])[-1] for m, t in zip(oracles, forced)]
        got = torch.from_dlpack(ex.logits()).cpu().numpy()
        for b in range(len(prompts)):
            # bf16 weights in both; the GPU rounds activations to bf16 between ops: the executor
            # tests' bound on the relative L2 error (tests/runtime/conventional_test.cu).
            assert rel_l2(got[b], want[b]) <= 2e-2, (step, b)


@needs_gpu
def test_llm_greedy_tokens_match_the_executor(ckpt):
    new = 12
    ex = megaops.Executor(ckpt, max_batch=1, max_seq=len(PROMPT) + new)
    tokens = ex.prefill([PROMPT])
    for _ in range(new - 1):
        tokens += ex.decode_step()
    llm = megaops.LLM(ckpt, device="cuda", max_context=64, max_batch=2)
    assert llm.backend.startswith("GPU")
    greedy = megaops.SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)
    sampled = megaops.SamplingParams(max_tokens=new, temperature=0.9, seed=4, ignore_eos=True)
    outs = llm.generate([PROMPT, PROMPT], [greedy, sampled])
    assert outs[0].token_ids == tokens
    assert len(outs[1].token_ids) == new and outs[1].finish_reason == "length"
    streamed = list(llm.stream(PROMPT, greedy))
    assert sum((d.token_ids for d in streamed), []) == tokens
    assert streamed[-1].finish_reason == "length"
    assert llm.stats()["kv_blocks_used"] == 0


@needs_gpu
def test_executor_on_a_preset():
    ex = megaops.Executor("tiny-qwen3", max_batch=1, max_seq=32, seed=5)
    tok = ex.prefill([PROMPT])
    assert torch.from_dlpack(ex.logits()).argmax(dim=1).tolist() == tok
    with pytest.raises(ValueError, match="neither a checkpoint directory nor a preset"):
        megaops.Executor("no-such-model")


def bf16_tolerance(k):
    # bf16 inputs are exact in fp32 products; the sums differ by accumulation order only.
    return 1e-4 * k ** 0.5


@needs_gpu
@pytest.mark.parametrize("rows,n", [(1, 64), (3, 2048), (111, 8)])
def test_rmsnorm_matches_torch(rows, n):
    g = torch.Generator(device="cuda").manual_seed(rows * 1000 + n)
    x = torch.randn(rows, n, device="cuda", generator=g) * 3
    w = (torch.rand(n, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
    y = torch.from_dlpack(megaops.cuda_ops.rmsnorm(x, w, 1e-5))
    assert y.dtype == torch.bfloat16 and y.is_cuda and tuple(y.shape) == (rows, n)
    ref = x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-5) * w.float()
    # The output is bf16: one rounding, 2^-8 relative.
    torch.testing.assert_close(y.float(), ref, rtol=2 ** -8, atol=1e-6)


@needs_gpu
@pytest.mark.parametrize("m,n,k", [(1, 256, 64), (2, 500, 128), (7, 96, 1024), (200, 64, 512)])
def test_matmul_matches_torch(m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda", generator=g) / k ** 0.5).to(torch.bfloat16)
    y = torch.from_dlpack(megaops.cuda_ops.matmul(x, w))
    assert y.dtype == torch.float32 and tuple(y.shape) == (m, n)
    ref = x.float() @ w.float().T
    torch.testing.assert_close(y, ref, rtol=1e-3, atol=bf16_tolerance(k))


@needs_gpu
@pytest.mark.parametrize("m,inter", [(1, 8), (4, 1024), (33, 136)])
def test_silu_mul_matches_torch(m, inter):
    g = torch.Generator(device="cuda").manual_seed(m * 31 + inter)
    gate_up = torch.randn(m, 2 * inter, device="cuda", generator=g) * 2
    act = torch.from_dlpack(megaops.cuda_ops.silu_mul(gate_up))
    assert act.dtype == torch.bfloat16 and tuple(act.shape) == (m, inter)
    gate, up = gate_up[:, :inter], gate_up[:, inter:]
    ref = torch.nn.functional.silu(gate) * up
    torch.testing.assert_close(act.float(), ref, rtol=2 ** -8, atol=1e-6)  # one bf16 rounding


@needs_gpu
def test_cuda_ops_on_the_current_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.randn(4, 256, device="cuda").to(torch.bfloat16)
        w = torch.randn(128, 256, device="cuda").to(torch.bfloat16)
        y = torch.from_dlpack(megaops.cuda_ops.matmul(x, w, stream=s.cuda_stream))
    s.synchronize()
    torch.testing.assert_close(y, x.float() @ w.float().T, rtol=1e-3, atol=bf16_tolerance(256))


@needs_gpu
def test_bad_tensors_get_one_line_errors():
    x = torch.randn(2, 64, device="cuda")
    w = torch.ones(64, device="cuda", dtype=torch.bfloat16)
    x16 = x.to(torch.bfloat16)
    cases = [
        (lambda: megaops.cuda_ops.rmsnorm(x.cpu(), w, 1e-5),
         "x: expected a 2-D float32 C-contiguous CUDA tensor, found a 2-D float32 tensor on cpu"),
        (lambda: megaops.cuda_ops.rmsnorm(x, w.float(), 1e-5), "w: expected a 1-D bfloat16"),
        (lambda: megaops.cuda_ops.rmsnorm(x, w[:32], 1e-5), "w: dimension 0: expected 64"),
        (lambda: megaops.cuda_ops.matmul(x, x16), "x: expected a 2-D bfloat16"),
        (lambda: megaops.cuda_ops.matmul(x16.T, x16), "non-contiguous"),
        (lambda: megaops.cuda_ops.silu_mul(x.to(torch.float16)), "gate_up: expected a 2-D float32"),
        (lambda: megaops.cuda_ops.silu_mul(torch.randn(2, 12, device="cuda")), "inter"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as err:
            call()
        assert message in str(err.value)
        assert "\n" not in str(err.value)


@pytest.mark.skipif(megaops.gpu_available(), reason="a GPU is available here")
def test_without_a_gpu_the_executor_and_cuda_ops_raise_one_error():
    with pytest.raises(RuntimeError, match="built without CUDA|no CUDA device") as err:
        megaops.Executor("tiny-llama3")
    assert "\n" not in str(err.value)
    x = np.zeros((2, 64), np.float32)
    with pytest.raises(RuntimeError, match="built without CUDA|no CUDA device"):
        megaops.cuda_ops.rmsnorm(x, x[0], 1e-5)
