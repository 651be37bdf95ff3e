#!/usr/bin/env bash
# llama.cpp as a peer of megaops, on the GPU machine: for each preset a GGUF of random bf16 weights
# of the same shapes (make_gguf.py, written once into $GGUF_DIR), then llama-bench with every layer
# on the GPU and flash attention on: prompt processing at PROMPTS tokens (time to first token of
# one sequence) and TG new tokens one at a time (decode, batch 1). JSON per preset in $OUT
# (llama-bench's own: avg_ns and stddev_ns per test), and a short table. The binary and the
# vocabularies come from bench/peers/llama_cpp/build.sh, in $LLAMA_DIR (default .carry/llama.cpp).
#   OUT=/some/dir bench/peers/llama_cpp/run.sh
# Knobs: PRESETS (default llama3.2-1b llama3.1-8b), PROMPTS (default 512,4096,16384), TG (128),
# REPS (3), GGUF_DIR (/tmp/megaops-gguf), LLAMA_DIR.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
LLAMA_DIR=${LLAMA_DIR:-$root/.carry/llama.cpp}
OUT=${OUT:-out}
PRESETS=${PRESETS:-llama3.2-1b llama3.1-8b}
PROMPTS=${PROMPTS:-512,4096,16384}
TG=${TG:-128}
REPS=${REPS:-3}
GGUF_DIR=${GGUF_DIR:-/tmp/megaops-gguf}
mkdir -p "$OUT" "$GGUF_DIR"
bench="$LLAMA_DIR/llama-bench"
[ -x "$bench" ] || { echo "error: $bench: not built (bench/peers/llama_cpp/build.sh)" >&2; exit 1; }
# The CUDA runtime and cuBLAS it links: the toolkit's, else PyTorch's pip copies.
if ldd "$bench" | grep -q "not found"; then
  pip_libs=$(python3 -c "import os, nvidia; p = list(nvidia.__path__)[0]; print(':'.join(os.path.join(p, d, 'lib') for d in sorted(os.listdir(p)) if os.path.isdir(os.path.join(p, d, 'lib'))))" 2>/dev/null)
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${pip_libs:-}:${LD_LIBRARY_PATH:-}"
fi
ldd "$bench" | grep -E "cudart|cublas|not found"
status=0
for preset in $PRESETS; do
  case $preset in
    llama*) vocab=$LLAMA_DIR/ggml-vocab-llama-bpe.gguf ;;
    qwen*) vocab=$LLAMA_DIR/ggml-vocab-qwen2.gguf ;;
    *) echo "error: PRESETS: unknown preset $preset" >&2; exit 1 ;;
  esac
  model="$GGUF_DIR/$preset-bf16.gguf"
  if [ ! -f "$model" ]; then
    echo "== writing $model ($(date -u +%H:%M:%S))"
    python3 "$here/make_gguf.py" --preset "$preset" --vocab "$vocab" --out "$model" || { status=1; continue; }
  fi
  echo "== llama-bench $preset ($(date -u +%H:%M:%S))"
  "$bench" -m "$model" -p "$PROMPTS" -n "$TG" -ngl 99 -fa on -r "$REPS" -o json \
    >"$OUT/llama_bench_$preset.json" 2>"$OUT/llama_bench_$preset.log" || status=1
done
python3 - "$OUT" $PRESETS <<'PY'
import json, os, sys
out = sys.argv[1]
for preset in sys.argv[2:]:
    p = os.path.join(out, f"llama_bench_{preset}.json")
    if not os.path.exists(p) or os.path.getsize(p) == 0:
        print(f"llama.cpp {preset}: no result (see llama_bench_{preset}.log)")
        continue
    for r in json.load(open(p)):
        ms = r["avg_ns"] / 1e6
        if r["n_prompt"] > 0:
            print(f"llama.cpp {preset:12s} prompt {r['n_prompt']:6d}: {ms:9.1f} ms "
                  f"({r['avg_ts']:.0f} tok/s)")
        else:
            print(f"llama.cpp {preset:12s} decode {r['n_gen']:4d} tokens: "
                  f"{ms / r['n_gen']:.3f} ms/token")
PY
exit $status
