"""Seeded test strings for the tokenizer exactness tests and the encode-speed measurement: Unicode
scripts, emoji (ZWJ sequences, skin tones, flags), code, whitespace runs, numbers, contractions,
decomposed (NFD) text, stray code points and the special-token text of both families, mixed."""
import os
import random
import unicodedata

SCRIPT_RANGES = [(0x41, 0x7A), (0xC0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x530, 0x58F),
                 (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0x980, 0x9FF), (0xE00, 0xE7F),
                 (0x10A0, 0x10FF), (0x1100, 0x11FF), (0x3040, 0x30FF), (0x4E00, 0x9FFF),
                 (0xAC00, 0xD7A3), (0x1D400, 0x1D7FF), (0x20000, 0x2A6DF)]
EMOJI = ["🦙", "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🏳️‍🌈", "❤️", "🧑🏿‍💻", "✨", "🤖", "1️⃣", "🫠"]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009",
              "\u200b", "\u0085", "\u2028", "\u202f", "\x0b", "\x0c", " \n ", "\t\t\n"]
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|python_tag|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
            "<think>", "</think>", "<tool_call>", "<|fim_prefix|>", "<|eot_id", "<|im_",
            "<|reserved_special_token_0|>", "<|", "|>"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "’s", "n't"]
WORDS = ("the quick brown fox jumps over lazy dog Hello World tokenizer llama qwen byte pair "
         "encoding naïve café résumé Straße Ærø ﬁne ǅemal İstanbul ΑΒΓ αβγ Привет мир こんにちは "
         "世界 안녕하세요 مرحبا שלום नमस्ते สวัสดี ❤ e\u0301 A\u030a n\u0303o").split()


def code_lines():
    import json as mod
    root = os.path.dirname(mod.__file__)
    lines = []
    for name in sorted(os.listdir(root)):
        if name.endswith(".py"):
            with open(os.path.join(root, name), encoding="utf-8") as f:
                lines += f.read().splitlines(keepends=True)
    return lines


def fragment(rng, code):
    kind = rng.randrange(11)
    if kind == 0:
        lo, hi = rng.choice(SCRIPT_RANGES)
        return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 12)))
    if kind == 1:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4)))
    if kind == 2:
        return "".join(rng.choice(code) for _ in range(rng.randint(1, 4)))
    if kind == 3:
        return "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 6)))
    if kind == 4:
        n = str(rng.randint(0, 10 ** rng.randint(1, 15)))
        return rng.choice([n, n + "." + n[:3], "-" + n, f"{int(n):,}", "0x" + n, n + "%"])
    if kind == 5:
        return rng.choice(SPECIALS)
    if kind == 6:
        return rng.choice(WORDS) + rng.choice(CONTRACTIONS)
    if kind == 7:
        # Any code point except surrogates: the pre-tokenizer regex's character classes at their
        # edges (private use, combining marks, controls). Not those unassigned in Unicode 14:
        # Debian 12's PCRE2 (10.42) has Unicode 14's tables and HF's Oniguruma Unicode 16's, so a
        # character added since (e.g. U+1CCF7, a digit in 16) is classed differently; docs/python.md
        # says so.
        while True:
            c = rng.randint(0, 0x10FFFF)
            if not 0xD800 <= c <= 0xDFFF and (unicodedata.category(chr(c)) != "Cn" or c >= 0xE0000):
                return chr(c)
    if kind == 8:
        return "".join(rng.choice(" \t\n") if rng.random() < 0.3 else rng.choice(WORDS)
                       for _ in range(rng.randint(1, 10)))
    if kind == 9:
        return " " * rng.randint(1, 40) + rng.choice(WORDS)
    return rng.choice(WORDS).upper() + rng.choice(["!", "?", "...", "—", "«»", "''", '"', "__"])


def strings(n, seed=20261204):
    rng = random.Random(seed)
    code = code_lines()
    out = ["", " ", "\n", "<|eot_id|>", "<|im_start|>user\nhi<|im_end|>", "a" * 5000,
           " " * 3000, "1" * 1000, "🦙" * 200]
    while len(out) < n:
        s = "".join(fragment(rng, code) for _ in range(rng.randint(1, 8)))
        out.append(s)
    return out


def speed_corpus():
    """About 4 MB of mixed text: code, prose-like words and the mixed strings above."""
    rng = random.Random(7)
    code = code_lines()
    parts = []
    parts += code * 3
    parts += [" ".join(rng.choice(WORDS) for _ in range(20)) + "\n" for _ in range(20000)]
    parts += [s.replace("\n", " ") + "\n" for s in strings(20000, seed=99)]
    rng.shuffle(parts)
    return "".join(parts)
