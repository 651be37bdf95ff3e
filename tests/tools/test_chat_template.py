"""The checkpoints' own chat templates (Llama 3.1 and Qwen 3, as the fixtures carry them) rendered
by megaops (llama.cpp's Jinja engine) against transformers' apply_chat_template: the same text and
the same ids for each conversation, with and without the generation prompt."""
import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CLI = os.environ.get("MEGAOPS_CLI", os.path.join(ROOT, "build", "megaops"))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizers")

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "Answer in French."},
     {"role": "user", "content": "Good morning"},
     {"role": "assistant", "content": "Bonjour !"},
     {"role": "user", "content": "How are you?\nTell me 🦙 facts."}],
    [{"role": "user", "content": "  leading and trailing spaces  "},
     {"role": "assistant", "content": "ok"},
     {"role": "user", "content": "<|eot_id|> and <|im_end|> typed by a user"},
     {"role": "assistant", "content": "<think>\nreasoning\n</think>\n\nanswer"},
     {"role": "user", "content": "Ünïcödé — 你好 — مرحبا"}],
    [{"role": "user", "content": ""}],
    [{"role": "system", "content": "multi\nline\n\nsystem"},
     {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"},
     {"role": "user", "content": "e"}],
]


def megaops(model, messages, tmp_path, *flags):
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    out = subprocess.run([CLI, "tokenize", "--model", model, "--chat", str(path), *flags],
                         check=True, capture_output=True)
    return out.stdout.decode("utf-8")


@pytest.mark.parametrize("family", ["llama3", "qwen3"])
@pytest.mark.parametrize("index", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_render_matches_transformers(family, index, generation_prompt, tmp_path):
    from transformers import AutoTokenizer
    model = os.path.join(FIXTURES, family)
    hf = AutoTokenizer.from_pretrained(model)
    messages = CONVERSATIONS[index]
    flags = [] if generation_prompt else ["--no-generation-prompt"]
    want = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    assert megaops(model, messages, tmp_path, "--render", *flags) == want
    want_ids = hf.apply_chat_template(messages, tokenize=True,
                                      add_generation_prompt=generation_prompt)
    if hasattr(want_ids, "keys"):  # transformers 5 returns a BatchEncoding
        want_ids = want_ids["input_ids"]
    got_ids = [int(x) for x in megaops(model, messages, tmp_path, *flags).strip().split(",")]
    assert got_ids == list(want_ids)


@pytest.mark.parametrize("thinking", [True, False])
def test_qwen3_enable_thinking(thinking, tmp_path):
    from transformers import AutoTokenizer
    model = os.path.join(FIXTURES, "qwen3")
    hf = AutoTokenizer.from_pretrained(model)
    messages = CONVERSATIONS[1]
    want = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                  enable_thinking=thinking)
    got = megaops(model, {"messages": messages, "enable_thinking": thinking}, tmp_path, "--render")
    assert got == want


def test_template_raise_exception_is_one_line(tmp_path):
    # Llama 3.1's template raises on a conversation it cannot render (two system messages with
    # tools is one; an unknown role in Qwen 3's is another).
    model = os.path.join(FIXTURES, "qwen3")
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"role": "user", "content": "a"},
                                {"role": "assistant", "content": "b",
                                 "tool_calls": [{"function": {"name": "f", "arguments": 5}}]}]))
    out = subprocess.run([CLI, "tokenize", "--model", model, "--chat", str(path), "--render"],
                         capture_output=True, text=True)
    # Whatever the outcome, megaops agrees with transformers on whether this renders.
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(model)
    try:
        hf.apply_chat_template(json.loads(path.read_text()), tokenize=False)
        assert out.returncode == 0
    except Exception:
        assert out.returncode == 1
        assert out.stderr.count("\n") == 1


def test_malformed_template_is_one_line(tmp_path):
    for name in ("tokenizer.json", "generation_config.json"):
        (tmp_path / name).write_bytes(open(os.path.join(FIXTURES, "qwen3", name), "rb").read())
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "chat_template": "{% for m in messages %}{{ m"}))
    out = subprocess.run([CLI, "tokenize", "--model", str(tmp_path), "--text", "x"],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1
    assert "tokenizer_config.json: chat_template: template does not parse" in out.stderr
