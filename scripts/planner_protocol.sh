#!/usr/bin/env bash
# The planner validation protocol (docs/planner-validation.md) in one run on one GPU: the 16
# decode profiles, the pools from them (the planner's code is the carried build's, committed
# before this run), then every candidate of every pool of at least 8, then the report. No step
# between profiling and measuring, so nobody sees a profile before the measurements. About 10
# minutes on an H200: run it detached across two device calls (start it in the background in one,
# collect $OUTDIR in the next; dev/call_lib.sh's wait_done waits for it).
#   BIN=.carry/x/NAME scripts/planner_protocol.sh OUTDIR
# A subset when device time is short (the report says which cases ran):
#   PROTOCOL_PRESETS="llama3.2-1b llama3.1-8b" PROTOCOL_BATCHES="1 8" scripts/planner_protocol.sh OUTDIR
# and PROTOCOL_OBJECTIVES="ttft" for one objective (the profiles are the same for both).
set -u
P=$1
PRESETS=${PROTOCOL_PRESETS:-llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b}
BATCHES=${PROTOCOL_BATCHES:-1 8 32 64}
OBJECTIVES=${PROTOCOL_OBJECTIVES:-step ttft}
BIN=${BIN:-.carry/bin}
export MEGAOPS_GIT_SHA=$(cat "$BIN/GIT_SHA" 2>/dev/null || echo unknown)
mkdir -p "$P/profiles" "$P/pools" "$P/measured"
# The profiles run a plan of the conventional step without PDL, whatever the batch's default: the
# planner predicts from it, and the serial overlap figure needs an executor set up for the
# multi-stream overlap step (a PDL chain plan leaves it out).
echo '{"format": "megaops-plan", "version": 1, "source": "planner protocol"}' > "$P/profile_plan.json"
for preset in $PRESETS; do
  for b in $BATCHES; do
    echo "== profile $preset b$b ($(date -u +%T))"
    "$BIN/megaops" profile --preset "$preset" --batch "$b" --plan "$P/profile_plan.json" \
      --json "$P/profiles/profile_${preset}_b$b.json" > "$P/profiles/profile_${preset}_b$b.log" 2>&1 ||
      echo "profile $preset b$b failed"
  done
done
echo "== plan ($(date -u +%T))"
python3 scripts/validate_planner.py plan --megaops "$BIN/megaops" --profiles "$P/profiles" \
  --out "$P/pools" --presets $PRESETS --batches $BATCHES --objectives $OBJECTIVES
echo "== measure ($(date -u +%T))"
python3 scripts/validate_planner.py measure --megaops "$BIN/megaops" --pools "$P/pools" \
  --out "$P/measured"
echo "== report ($(date -u +%T))"
python3 scripts/validate_planner.py report --pools "$P/pools" --measured "$P/measured" \
  --out "$P/report.md"
echo "== done ($(date -u +%T))"
