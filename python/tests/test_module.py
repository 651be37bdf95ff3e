"""The Python module against the CLI on a random-weight checkpoint with its tokenizer (written by
`megaops init-random`): the same prompt gives the same tokens and text through both, chat
templates match the CLI's, model steps return logits whose argmax is the greedy token, and single
ops on DLPack tensors agree with NumPy."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import megaops
from conftest import CLI



def cli(*args):
    return subprocess.run([CLI, *args], check=True, capture_output=True).stdout.decode("utf-8")


def test_tokens_and_text_match_cli(ckpt):
    m = megaops.load(ckpt, device="cpu")
    ids = m.encode("The model writes")
    cli_ids = [int(x) for x in cli("tokenize", "--model", ckpt, "--text",
                                   "The model writes").split(",")]
    assert ids == cli_ids
    out = m.generate(ids, max_new_tokens=12, temperature=0.8, top_k=50, seed=11, ignore_eos=True)
    cli_tokens = [int(x) for x in cli("generate", "--model", ckpt, "--cpu", "--prompt-ids",
                                      ",".join(map(str, ids)), "--max-new-tokens", "12",
                                      "--temperature", "0.8", "--top-k", "50", "--seed", "11",
                                      "--ignore-eos").split()]
    assert out["tokens"] == cli_tokens
    assert out["stop_reason"] == "length"
    text = m.generate("The model writes", max_new_tokens=12, temperature=0.8, top_k=50, seed=11,
                      ignore_eos=True)
    assert text["tokens"] == cli_tokens  # the text prompt tokenizes to the same ids
    streamed = cli("generate", "--model", ckpt, "--cpu", "--prompt", "The model writes",
                   "--max-new-tokens", "12", "--temperature", "0.8", "--top-k", "50", "--seed",
                   "11", "--ignore-eos")
    assert streamed == text["text"] + "\n"  # the CLI ends the streamed text with a newline
    assert text["text"] == m.decode(cli_tokens, skip_special_tokens=True)


def test_repeated_generation_matches_fresh_cli_runs(ckpt):
    # The model keeps its generator between calls; each call must still give what a fresh run
    # gives, whatever came before (another prompt, other sampling options, the same again).
    m = megaops.load(ckpt, device="cpu")
    for prompt, temperature, seed in [("Hello there", 0.0, 0), ("Hello", 0.9, 5),
                                      ("Hello there, how", 0.9, 5), ("Hello there", 0.0, 0)]:
        got = m.generate(prompt, max_new_tokens=6, temperature=temperature, top_k=40, seed=seed,
                         ignore_eos=True)
        want = [int(x) for x in cli("generate", "--model", ckpt, "--cpu", "--prompt-ids",
                                    ",".join(map(str, m.encode(prompt))), "--max-new-tokens", "6",
                                    "--temperature", str(temperature), "--top-k", "40", "--seed",
                                    str(seed), "--ignore-eos").split()]
        assert got["tokens"] == want, (prompt, temperature, seed)


def test_streaming_pieces_concatenate_to_the_text(ckpt):
    m = megaops.load(ckpt, device="cpu")
    pieces = []
    out = m.generate("Hello", max_new_tokens=10, temperature=0, on_text=pieces.append,
                     ignore_eos=True)
    assert "".join(pieces) == out["text"]


def test_chat_generates_from_the_template_prompt(ckpt):
    m = megaops.load(ckpt, device="cpu")
    messages = [{"role": "user", "content": "Hi"}]
    prompt_ids = m.encode(m.apply_chat_template(messages), add_special_tokens=False)
    out = megaops.chat(m, messages, max_new_tokens=5, temperature=0, ignore_eos=True)
    assert out["prompt_tokens"] == prompt_ids
    assert out["tokens"] == m.generate(prompt_ids, max_new_tokens=5, temperature=0,
                                       ignore_eos=True)["tokens"]


def test_chat_template_matches_cli(ckpt, tmp_path):
    m = megaops.load(ckpt, device="cpu")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    (tmp_path / "m.json").write_text(json.dumps(messages))
    assert m.apply_chat_template(messages) == cli("tokenize", "--model", ckpt, "--chat",
                                                  str(tmp_path / "m.json"), "--render")


def test_forward_steps_and_logits(ckpt):
    m = megaops.load(ckpt, device="cpu")
    ids = m.encode("The model")
    logits = np.from_dlpack(m.forward(ids))
    assert logits.shape == (len(ids), m.config["vocab_size"])
    assert np.isfinite(logits).all()
    greedy = m.generate(ids, max_new_tokens=2, temperature=0, ignore_eos=True)["tokens"]
    assert int(logits[-1].argmax()) == greedy[0]
    # A second step continues the same context (KV cache): the next logits pick the next token.
    step = np.from_dlpack(m.forward([greedy[0]]))
    assert int(step[-1].argmax()) == greedy[1]
    assert m.position == len(ids) + 1
    m.reset()
    assert m.position == 0


def test_single_ops_on_dlpack_tensors(ckpt):
    m = megaops.load(ckpt, device="cpu")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 128), dtype=np.float32)
    w = np.from_dlpack(m.weight("model.norm.weight"))
    got = np.from_dlpack(megaops.ops.rmsnorm(x, w, 1e-5))
    want = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    wq = rng.standard_normal((64, 128), dtype=np.float32)
    np.testing.assert_allclose(np.from_dlpack(megaops.ops.matmul(x, wq)), x @ wq.T, rtol=1e-4,
                               atol=1e-4)
    g, u = x[:, :64].copy(), x[:, 64:].copy()
    np.testing.assert_allclose(np.from_dlpack(megaops.ops.silu_mul(g, u)),
                               g / (1 + np.exp(-g)) * u, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="w: expected shape"):
        megaops.ops.rmsnorm(x, w[:5].copy(), 1e-5)
    torch = pytest.importorskip("torch")
    t = torch.from_dlpack(megaops.ops.matmul(torch.from_numpy(x), torch.from_numpy(wq)))
    assert torch.allclose(t, torch.from_numpy(x) @ torch.from_numpy(wq).T, atol=1e-4)


def test_bad_input_is_a_value_error(ckpt):
    with pytest.raises(ValueError, match="device: expected auto, cpu or cuda"):
        megaops.load(ckpt, device="tpu")
    with pytest.raises(ValueError, match="tokenizer.json: missing"):
        megaops.load(os.path.dirname(ckpt))


def test_plan_is_read_at_load(ckpt, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "megaops-plan", "version": 1,
                               "decode": {"backend": "fast"}}))
    with pytest.raises(ValueError, match=f"{bad}: decode.backend: expected conventional"):
        megaops.load(ckpt, device="cpu", plan=str(bad))
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps({"format": "megaops-plan", "version": 1,
                                 "decode": {"backend": "pdl_chain", "overlap_streams": 1}}))
    m = megaops.load(ckpt, device="cpu", plan=str(chain))  # the CPU oracle runs no plan
    assert len(m.generate("Hello", max_new_tokens=3, ignore_eos=True)["tokens"]) == 3


def test_gpu_generation_matches_cli(ckpt):
    """On a machine with a CUDA device (a CUDA build): the module's GPU generation gives the CLI's
    GPU tokens. Skipped, saying so, without one."""
    try:
        m = megaops.load(ckpt, device="cuda")
    except ValueError as e:
        pytest.skip(f"no CUDA device: {e}")
    ids = m.encode("The model writes")
    out = m.generate(ids, max_new_tokens=16, temperature=0, ignore_eos=True)
    assert out["backend"].startswith("GPU")
    cli_tokens = [int(x) for x in cli("generate", "--model", ckpt, "--prompt-ids",
                                      ",".join(map(str, ids)), "--max-new-tokens", "16",
                                      "--ignore-eos").split()]
    assert out["tokens"] == cli_tokens


def test_cuda_libraries_are_found_beside_pytorch(tmp_path, monkeypatch):
    """A wheel on a machine whose loader path lacks cuBLASLt takes the copy NVIDIA's pip packages
    put beside PyTorch (nvidia/<package>/lib), when the toolkit's lib64 has none."""
    soname = "libmegaops_test_absent.so.13"
    lib = tmp_path / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    (tmp_path / "nvidia" / "__init__.py").write_text("")
    (lib / soname).write_bytes(b"")
    assert megaops._find_cuda_library(soname) is None
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nvidia", raising=False)
    assert megaops._find_cuda_library(soname) == str(lib / soname)
