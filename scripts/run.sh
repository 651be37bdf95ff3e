#!/usr/bin/env bash
# The main job on its embedded default: install what is missing, build, write a random-weight
# checkpoint of a real architecture (default tiny-llama3) and stream generated token ids from it
# (GPU executor when a GPU is present, the CPU oracle otherwise).
#   scripts/run.sh [PRESET] [MAX_NEW_TOKENS]
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-tiny-llama3}
NEW=${2:-16}
scripts/setup.sh
BUILD_TARGET=megaops scripts/build.sh
OUT=${MEGAOPS_DEMO_DIR:-/tmp/megaops-demo}/$PRESET
[ -f "$OUT/config.json" ] || build/megaops init-random --preset "$PRESET" --out "$OUT"
build/megaops generate --model "$OUT" --prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens "$NEW"
