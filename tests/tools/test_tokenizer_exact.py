"""megaops' tokenizer against HF `tokenizers` on the same tokenizer.json files: the committed
fixtures of both families' formats and the real Llama 3 and Qwen 2/3 vocabularies (rebuilt from
the files llama.cpp ships in PyPI's llama-cpp-python). Every one of the 10,000+ strings must encode
to the same ids, and ids must decode to the same text, including random id sequences whose bytes
are not valid UTF-8."""
import json
import os
import random
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import text_strings  # noqa: E402

CLI = os.environ.get("MEGAOPS_CLI", os.path.join(ROOT, "build", "megaops"))
N_STRINGS = int(os.environ.get("MEGAOPS_TOKENIZER_STRINGS", "10000"))


@pytest.fixture(scope="session")
def real_dir(tmp_path_factory):
    llama_cpp = subprocess.run([os.path.join(ROOT, "scripts", "fetch_text_deps.sh")],
                               check=True, capture_output=True, text=True).stdout.strip()
    out = tmp_path_factory.mktemp("real-tokenizers")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_tokenizer_fixtures.py"),
                    "real", llama_cpp, str(out)], check=True)
    return str(out)


def tokenizer_dirs(real):
    fixtures = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
    return {"fixture-llama3": os.path.join(fixtures, "llama3"),
            "fixture-qwen3": os.path.join(fixtures, "qwen3"),
            "real-llama3": os.path.join(real, "llama3"),
            "real-qwen3": os.path.join(real, "qwen3")}


def run_jsonl(model, values, tmp_path, *flags):
    path = tmp_path / "in.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for v in values:
            f.write(json.dumps(v) + "\n")
    out = subprocess.run([CLI, "tokenize", "--model", model, "--jsonl", str(path), *flags],
                         check=True, capture_output=True, text=True, encoding="utf-8")
    return [json.loads(line) for line in out.stdout.split("\n")[:-1]]


@pytest.mark.parametrize("name", ["fixture-llama3", "fixture-qwen3", "real-llama3", "real-qwen3"])
def test_encode_and_decode_match_hf(name, real_dir, tmp_path):
    from tokenizers import Tokenizer
    model = tokenizer_dirs(real_dir)[name]
    hf = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    strings = text_strings.strings(N_STRINGS)
    want = [e.ids for e in hf.encode_batch(strings, add_special_tokens=True)]
    got = run_jsonl(model, strings, tmp_path)
    bad = [(s, w, g) for s, w, g in zip(strings, want, got) if w != g]
    print(f"{name}: {len(strings) - len(bad)}/{len(strings)} strings encode as HF does")
    assert len(got) == len(strings)
    assert not bad, f"{len(bad)} mismatches, first: {bad[0]!r}"

    want_plain = [e.ids for e in hf.encode_batch(strings[:2000], add_special_tokens=False)]
    assert run_jsonl(model, strings[:2000], tmp_path, "--no-special") == want_plain

    # Decoding: the ids above, and random ids (split UTF-8 sequences, specials, unknown ids).
    rng = random.Random(5)
    vocab = hf.get_vocab_size(with_added_tokens=True)
    id_lists = want[:3000] + [[rng.randrange(vocab) for _ in range(rng.randint(1, 30))]
                              for _ in range(3000)]
    for skip in (False, True):
        hf_text = hf.decode_batch(id_lists, skip_special_tokens=skip)
        ours = run_jsonl(model, id_lists, tmp_path, *(["--skip-special"] if skip else []))
        bad = [(i, w, g) for i, w, g in zip(id_lists, hf_text, ours) if w != g]
        assert not bad, f"{len(bad)} decode mismatches (skip_special={skip}), first: {bad[0]!r}"


def test_malformed_tokenizer_is_one_line(tmp_path):
    src = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "llama3", "tokenizer.json")
    with open(src, encoding="utf-8") as f:
        doc = json.load(f)
    doc["model"]["merges"][5] = "onlyonetoken"
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc), encoding="utf-8")
    out = subprocess.run([CLI, "tokenize", "--model", str(tmp_path), "--text", "hi"],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1
    assert "tokenizer.json: model.merges[5]: expected" in out.stderr
