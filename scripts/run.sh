#!/usr/bin/env bash
# The main job on its embedded default: install what is missing, build, write a random-weight
# checkpoint of a real architecture (default tiny-llama3) with a tokenizer of the family's format,
# and stream the text it generates for a text prompt (GPU executor when a GPU is present, the CPU
# oracle otherwise). The weights are random, so the text is random word pieces.
#   scripts/run.sh [PRESET] [MAX_NEW_TOKENS] [PROMPT]
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-tiny-llama3}
NEW=${2:-16}
PROMPT=${3:-"The model writes"}
scripts/setup.sh
BUILD_TARGET=megaops scripts/build.sh
OUT=${MEGAOPS_DEMO_DIR:-/tmp/megaops-demo}/$PRESET
# init-random publishes a directory only once it is complete; one left by an interrupted older
# build (a .partial file, or no weights or tokenizer beside config.json) is written again.
complete() {
  [ -f "$1/config.json" ] && [ -f "$1/tokenizer.json" ] || return 1
  [ -f "$1/model.safetensors" ] || [ -f "$1/model.safetensors.index.json" ] || return 1
  ! compgen -G "$1/*.partial" >/dev/null
}
if ! complete "$OUT"; then
  [ -e "$OUT" ] && echo "run.sh: $OUT is incomplete; writing it again" >&2
  build/megaops init-random --preset "$PRESET" --out "$OUT" --force
fi
echo "prompt: $PROMPT"
build/megaops generate --model "$OUT" --prompt "$PROMPT" --max-new-tokens "$NEW"
