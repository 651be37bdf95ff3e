#!/usr/bin/env python3
"""Encode speed of megaops' tokenizer against HF `tokenizers` on the same tokenizer.json files and
the same ~4 MB of mixed text (code, prose-like words, the exactness test's strings), one line per
encode call, single thread on both sides (RAYON_NUM_THREADS=1 for HF's batch encoder), median of 5
rounds after a warm-up round. Prints one JSON line per tokenizer.

  tokenizer_speed.py MEGAOPS_CLI DIR...
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "tools"))
import text_strings  # noqa: E402


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    from tokenizers import Tokenizer
    cli, dirs = sys.argv[1], sys.argv[2:]
    corpus = text_strings.speed_corpus()
    data = corpus.encode("utf-8")
    lines = corpus.splitlines(keepends=True)
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(data)
        path = f.name
    for d in dirs:
        hf = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        times = []
        for r in range(6):
            t0 = time.perf_counter()
            hf.encode_batch(lines, add_special_tokens=False)
            if r:
                times.append(time.perf_counter() - t0)
        hf_mbs = len(data) / statistics.median(times) / 1e6
        ours = json.loads(subprocess.run([cli, "tokenize", "--model", d, "--bench", path],
                                         check=True, capture_output=True, text=True).stdout)
        print(json.dumps({"tokenizer": d, "bytes": len(data),
                          "megaops_mb_per_s": round(ours["mb_per_s"], 2),
                          "hf_tokenizers_mb_per_s": round(hf_mbs, 2),
                          "ratio": round(ours["mb_per_s"] / hf_mbs, 2)}))
    os.unlink(path)


if __name__ == "__main__":
    main()
