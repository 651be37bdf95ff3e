#!/usr/bin/env python3
"""Writes tokenizer files in the exact formats of Llama 3 and Qwen 3 checkpoints, built with HF's
`tokenizers` library (no model hub is reachable here).

  make_tokenizer_fixtures.py fixtures OUT   small trained tokenizers (vocab 3000) with each family's
                                            pre-tokenizer regex, normalizer, post-processor and
                                            added/special tokens, plus tokenizer_config.json with
                                            the family's real chat template and
                                            generation_config.json: tests/fixtures/tokenizers/
  make_tokenizer_fixtures.py real LLAMA_CPP OUT
                                            the real Llama 3 and Qwen 2/3 vocabularies and merges,
                                            from the vocabulary files llama.cpp ships in PyPI's
                                            llama-cpp-python (scripts/fetch_text_deps.sh), as
                                            tokenizer.json files of each family's format (large:
                                            written into a build directory, never committed)

The chat templates are the checkpoints' own, as llama.cpp ships them (models/templates/).
"""
import json
import os
import random
import sys

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                  "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                  "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                "<|image_pad|>", "<|video_pad|>"]
# Qwen 3 lists these as added tokens that are not special (they survive skip_special_tokens).
QWEN_PLAIN_ADDED = ["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
                    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
                    "<tool_response>", "</tool_response>", "<think>", "</think>"]

SCRIPTS = {
    "latin": (0x41, 0x24F), "greek": (0x391, 0x3C9), "cyrillic": (0x410, 0x44F),
    "arabic": (0x621, 0x64A), "hebrew": (0x5D0, 0x5EA), "devanagari": (0x905, 0x939),
    "thai": (0xE01, 0xE30), "hangul": (0xAC00, 0xD7A3), "cjk": (0x4E00, 0x9FFF),
    "hiragana": (0x3041, 0x3096), "emoji": (0x1F300, 0x1F64F),
}


def training_corpus(rng):
    """English and code from Python's standard library, plus syllables of many scripts."""
    import email, json as json_mod, http  # noqa: E401 (their sources are the corpus)
    texts = []
    for mod in (email, json_mod, http):
        root = os.path.dirname(mod.__file__)
        for name in sorted(os.listdir(root)):
            if name.endswith(".py"):
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    texts.append(f.read())
    for script, (lo, hi) in sorted(SCRIPTS.items()):
        words = ["".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 4)))
                 for _ in range(300)]
        texts.append(" ".join(rng.choice(words) for _ in range(3000)))
    texts.append(" ".join(str(rng.randint(0, 10**rng.randint(1, 9))) for _ in range(3000)))
    return texts


def build(family, vocab_size):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers
    rng = random.Random(1234)
    llama = family == "llama3"
    tok = Tokenizer(models.BPE(ignore_merges=llama))
    if not llama:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN if llama else QWEN_PATTERN),
                             behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=llama, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = LLAMA3_SPECIAL if llama else QWEN_SPECIAL
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(rng), trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if llama:
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                special_tokens=[("<|begin_of_text|>", bos)]),
        ])
    else:
        tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in QWEN_PLAIN_ADDED])
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def family_files(family, llama_cpp, tok):
    """tokenizer_config.json and generation_config.json for `tok`, with the real chat template."""
    llama = family == "llama3"
    name = "meta-llama-Llama-3.1-8B-Instruct.jinja" if llama else "Qwen-Qwen3-0.6B.jinja"
    with open(os.path.join(llama_cpp, "models", "templates", name), encoding="utf-8") as f:
        template = f.read()
    if llama:
        config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                  "clean_up_tokenization_spaces": True, "model_max_length": 131072,
                  "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template}
        # Llama 3.0's vocabulary has no <|eom_id|> (3.1 added it).
        ids = [i for i in (tok.token_to_id(t) for t in ("<|end_of_text|>", "<|eom_id|>",
                                                         "<|eot_id|>")) if i is not None]
        gen = {"bos_token_id": tok.token_to_id("<|begin_of_text|>"), "eos_token_id": ids,
               "do_sample": True, "temperature": 0.6, "top_p": 0.9}
    else:
        config = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                  "errors": "replace", "clean_up_tokenization_spaces": False,
                  "model_max_length": 131072, "split_special_tokens": False,
                  "tokenizer_class": "Qwen2Tokenizer", "chat_template": template}
        gen = {"bos_token_id": tok.token_to_id("<|endoftext|>"),
               "eos_token_id": [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")],
               "pad_token_id": tok.token_to_id("<|endoftext|>"), "do_sample": True,
               "temperature": 0.6, "top_k": 20, "top_p": 0.95}
    return config, gen


def write(out, tok_json, config, gen):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok_json)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")


def real_from_gguf(llama_cpp, family):
    """The real vocabulary and merges of a family as a tokenizer.json of its checkpoints' format."""
    import gguf
    from tokenizers import Tokenizer
    name = "ggml-vocab-llama-bpe.gguf" if family == "llama3" else "ggml-vocab-qwen2.gguf"
    reader = gguf.GGUFReader(os.path.join(llama_cpp, "models", name))

    def strings(key):
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    tokens = strings("tokenizer.ggml.tokens")
    type_field = reader.fields["tokenizer.ggml.token_type"]
    types = [int(type_field.parts[i][0]) for i in type_field.data]
    merges = strings("tokenizer.ggml.merges")
    llama = family == "llama3"
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        # GGUF token types: 1 normal, 3 control (special), 4 user-defined (added, not special).
        if ty == 1:
            vocab[t] = i
        elif ty in (3, 4):
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": ty == 3 or llama})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": llama,
                  "use_regex": False}
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None if llama else {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN if llama else QWEN_PATTERN},
             "behavior": "Isolated", "invert": False}, byte_level]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": llama, "vocab": vocab,
                  "merges": merges},
    }
    if llama:
        bos = tokens.index("<|begin_of_text|>")
        doc["post_processor"] = {"type": "Sequence", "processors": [
            doc["post_processor"],
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                      "tokens": ["<|begin_of_text|>"]}}}]}
    text = json.dumps(doc, ensure_ascii=False)
    tok = Tokenizer.from_str(text)  # HF must accept what we write
    # llama.cpp's test strings, with the ids the real HF tokenizer gave them.
    with open(os.path.join(llama_cpp, "models", name + ".inp"), encoding="utf-8") as f:
        inputs = f.read().split("\n__ggml_vocab_test__\n")
    with open(os.path.join(llama_cpp, "models", name + ".out"), encoding="utf-8") as f:
        outputs = f.read().split("\n")
    checked = 0
    for s, o in zip(inputs, outputs):
        want = [int(x) for x in o.split()]
        got = tok.encode(s, add_special_tokens=False).ids
        if got != want:
            raise SystemExit(f"{name}: {s!r}: built tokenizer gives {got}, real one {want}")
        checked += 1
    print(f"{family}: real vocabulary ({len(tokens)} tokens, {len(merges)} merges) matches the "
          f"real tokenizer's ids on llama.cpp's {checked} test strings", file=sys.stderr)
    return tok, text


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "fixtures":
        out = sys.argv[2]
        llama_cpp = os.popen(os.path.join(os.path.dirname(__file__), "fetch_text_deps.sh")).read()
        llama_cpp = llama_cpp.strip()
        for family in ("llama3", "qwen3"):
            tok = build(family, 3000)
            config, gen = family_files(family, llama_cpp, tok)
            write(os.path.join(out, family), tok.to_str(pretty=False), config, gen)
    elif len(sys.argv) == 4 and sys.argv[1] == "real":
        llama_cpp, out = sys.argv[2], sys.argv[3]
        for family in ("llama3", "qwen3"):
            tok, text = real_from_gguf(llama_cpp, family)
            config, gen = family_files(family, llama_cpp, tok)
            write(os.path.join(out, family), text, config, gen)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
