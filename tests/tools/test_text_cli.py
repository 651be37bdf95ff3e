"""Text in, text out on the command line, on random-weight checkpoints written by init-random:
the tokenizer files it writes are read by HF tokenizers / transformers with the same ids and
prompts, `generate --prompt` streams the text of the ids `--prompt-ids` prints, stop strings and
EOS end a run with the summary line saying why, `chat` answers each line, and a missing or
malformed tokenizer is one error line."""
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import text_strings  # noqa: E402

CLI = os.environ.get("MEGAOPS_CLI", os.path.join(ROOT, "build", "megaops"))
SUMMARY = re.compile(r"^generate: prompt (\d+) tokens, (\d+) new tokens, TTFT [0-9.]+ ms, "
                     r"[0-9.]+ tok/s, stop: (eos|stop string|length|interrupted) \(.*\)$")


def run(*args, stdin=None):
    return subprocess.run([CLI, *args], capture_output=True, input=stdin)


@pytest.fixture(scope="module", params=["tiny-llama3", "tiny-qwen3"])
def ckpt(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param) / "ckpt"
    assert run("init-random", "--preset", request.param, "--out", str(out)).returncode == 0
    return str(out)


def test_written_tokenizer_matches_hf(ckpt, tmp_path):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    hf = Tokenizer.from_file(os.path.join(ckpt, "tokenizer.json"))
    strings = text_strings.strings(2000, seed=3)
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in strings), encoding="utf-8")
    out = run("tokenize", "--model", ckpt, "--jsonl", str(path))
    assert out.returncode == 0, out.stderr
    got = [json.loads(line) for line in out.stdout.decode().split("\n")[:-1]]
    assert got == [e.ids for e in hf.encode_batch(strings)]
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    (tmp_path / "m.json").write_text(json.dumps(messages))
    want = AutoTokenizer.from_pretrained(ckpt).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)
    got = run("tokenize", "--model", ckpt, "--chat", str(tmp_path / "m.json"), "--render")
    assert got.stdout.decode() == want


def test_generate_text_is_the_text_of_the_ids(ckpt):
    ids = run("tokenize", "--model", ckpt, "--text", "The model writes").stdout.decode().strip()
    common = ["--model", ckpt, "--max-new-tokens", "16", "--temperature", "0.9", "--seed", "5",
              "--ignore-eos"]
    by_ids = run("generate", "--prompt-ids", ids, *common)
    by_text = run("generate", "--prompt", "The model writes", *common)
    assert by_ids.returncode == 0 and by_text.returncode == 0, by_text.stderr
    tokens = by_ids.stdout.decode().split()
    assert len(tokens) == 16
    want = run("tokenize", "--model", ckpt, "--decode", ",".join(tokens), "--skip-special")
    assert by_text.stdout.decode() == want.stdout.decode()  # both end with one newline
    line = by_text.stderr.decode().strip().splitlines()[-1]
    m = SUMMARY.match(line)
    assert m, line
    assert m.group(1) == str(len(ids.split(","))) and m.group(2) == "16"
    assert m.group(3) == "length"
    assert SUMMARY.match(by_ids.stderr.decode().strip().splitlines()[-1])


def test_stop_string_ends_before_it(ckpt):
    common = ["--model", ckpt, "--max-new-tokens", "40", "--temperature", "0.9", "--seed", "5",
              "--ignore-eos"]
    full = run("generate", "--prompt", "The model writes", *common).stdout.decode()[:-1]
    # A stop string from the middle of the full text: the output is the text before it.
    stop = full[len(full) // 2: len(full) // 2 + 2]
    if len(stop) < 2 or "\ufffd" in stop:
        pytest.skip("the random text has no plain stretch to stop on")
    out = run("generate", "--prompt", "The model writes", *common, "--stop", stop)
    assert out.stdout.decode() == full[:full.index(stop)] + "\n"
    assert "stop: stop string" in out.stderr.decode()


def test_eos_from_generation_config_stops(ckpt, tmp_path):
    # Make every token an EOS id: the run stops after the first one, saying so.
    gen = json.load(open(os.path.join(ckpt, "generation_config.json")))
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    d = tmp_path / "eos"
    d.mkdir()
    for name in os.listdir(ckpt):
        os.symlink(os.path.join(ckpt, name), d / name)
    os.unlink(d / "generation_config.json")
    gen["eos_token_id"] = list(range(cfg["vocab_size"]))
    (d / "generation_config.json").write_text(json.dumps(gen))
    out = run("generate", "--model", str(d), "--prompt", "Hi", "--max-new-tokens", "8")
    assert out.returncode == 0, out.stderr
    assert "1 new tokens" in out.stderr.decode() and "stop: eos" in out.stderr.decode()


def test_chat_answers_each_line(ckpt):
    out = run("chat", "--model", ckpt, "--max-new-tokens", "6", "--ignore-eos",
              stdin=b"Hello\n/reset\nAgain\n")
    assert out.returncode == 0, out.stderr
    summaries = [l for l in out.stderr.decode().splitlines() if l.startswith("chat: prompt")]
    assert len(summaries) == 2 and all("6 new tokens" in s for s in summaries)


def test_chat_runs_a_plan(ckpt, tmp_path):
    # The PDL chain on the GPU; without one the CPU oracle answers and says the plan did not run.
    plan = tmp_path / "chain.json"
    plan.write_text(json.dumps({"format": "megaops-plan", "version": 1,
                                "decode": {"backend": "pdl_chain", "overlap_streams": 1}}))
    out = run("chat", "--model", ckpt, "--max-new-tokens", "4", "--ignore-eos", "--plan", str(plan),
              stdin=b"Hello\nAgain\n")
    assert out.returncode == 0, out.stderr
    err = out.stderr.decode()
    summaries = [l for l in err.splitlines() if l.startswith("chat: prompt")]
    assert len(summaries) == 2 and all("4 new tokens" in s for s in summaries)
    assert ("GPU, pdl chain" in err) != ("not run: the CPU oracle runs no plan" in err), err


def test_text_errors_are_one_line(ckpt, tmp_path):
    d = tmp_path / "notok"
    d.mkdir()
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(ckpt, name), d / name)
    out = run("generate", "--model", str(d), "--prompt", "hi")
    assert out.returncode == 1
    err = out.stderr.decode()
    assert err.count("\n") == 1 and "tokenizer.json: missing" in err
    out = run("generate", "--model", ckpt, "--prompt", "hi", "--prompt-ids", "1")
    assert out.returncode == 2  # usage error: the options exclude each other
    out = run("generate", "--model", ckpt, "--prompt-ids", "1", "--stop", "x")
    assert out.returncode == 1 and b"--stop: stop strings need a text prompt" in out.stderr
    out = run("chat", "--model", ckpt, "--chat-template-kwargs", "[1]", stdin=b"")
    assert out.returncode == 1 and b"--chat-template-kwargs: expected a JSON object" in out.stderr
