#!/usr/bin/env bash
# Written in the twenty-third session for the next one's first call on one H200 (~420 s).
# Build: scripts/build_variant.sh main; scripts/build_variant.sh knobs dev/chain-knobs.patch;
# scripts/build_variant.sh knobsmarks dev/chain-knobs.patch dev/diag-marks.patch;
# scripts/pack_variants.sh main knobs knobsmarks (check each GIT_SHA against `git log`). Run as
# `bash dev/next-s24-call1.sh` with carry [".carry/pack.tar.xz"].
#   0. the chain's bit-equality with early triggers on (knobs);
#   1. llama3.2-1b's 0.75 (dev/README "Next GPU session" item 1): rows, two rounds, of main and
#      knobs with ring slots per shape (down at 3 slots, or QKV at 3, so one QKV CTA an SM fits
#      beside two of down's) and early triggers per op (o_proj: gate_up's CTAs start during
#      attention), on the small models, then the best-guess ones on the 8B;
#   2. traces with marks of the 1B chain with two of them.
. dev/call_lib.sh
unpack_builds
MEGAOPS_CHAIN_EARLY_TRIGGER=qkv_proj,attention,o_proj,gate_up_proj,down_proj,lm_head \
  gpu_tests early_tests $X/knobs 90 'Chain/*_b1:Chain/*_b2:Overlap.PdlChain*'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
# NAME|ENV (space-separated VAR=value, or -) for the knobs build; "main" runs the main build.
CONFIGS_SMALL="main knobs|- down3|MEGAOPS_STREAM_STAGES_FOR=2048x8192:3,1024x3072:3 qkv3|MEGAOPS_STREAM_STAGES_FOR=3072x2048:3,4096x1024:3
  eo|MEGAOPS_CHAIN_EARLY_TRIGGER=o_proj ea|MEGAOPS_CHAIN_EARLY_TRIGGER=attention
  eq|MEGAOPS_CHAIN_EARLY_TRIGGER=qkv_proj ed|MEGAOPS_CHAIN_EARLY_TRIGGER=down_proj"
CONFIGS_8B="main knobs|- eo|MEGAOPS_CHAIN_EARLY_TRIGGER=o_proj down2|MEGAOPS_STREAM_STAGES_FOR=4096x14336:2"
rows() {  # rows PRESET ROUND CONFIGS
  local m=$1 round=$2 c name envs
  for c in $3; do
    name=${c%%|*}
    if [ "$name" = main ]; then bench_rows main_${m}_r$round $X/main 400 --preset $m $CH; continue; fi
    envs=${c#*|}
    [ "$envs" = - ] && envs=
    # An assignment before a function call exports it to the commands inside for that call.
    eval "$envs bench_rows ${name}_${m}_r$round $X/knobs 400 --preset $m $CH"
  done
}
for round in 1 2; do
  order=$CONFIGS_SMALL
  [ $round = 2 ] && order=$(echo $CONFIGS_SMALL | tr ' ' '\n' | tac | tr '\n' ' ')
  rows llama3.2-1b $round "$order"
  rows qwen3-0.6b $round "$order"
done
for round in 1 2; do
  order=$CONFIGS_8B
  [ $round = 2 ] && order=$(echo $CONFIGS_8B | tr ' ' '\n' | tac | tr '\n' ' ')
  rows llama3.1-8b $round "$order"
done
for c in "eo MEGAOPS_CHAIN_EARLY_TRIGGER=o_proj" "down3 MEGAOPS_STREAM_STAGES_FOR=2048x8192:3"; do
  set -- $c
  env $2 timeout $(left 410) $X/knobsmarks/megaops trace --preset llama3.2-1b --batch 1 --streams 1 \
    --pdl-chain --out $O/trace_marks_$1.json > $O/trace_marks_$1.log 2>&1
  grep "step span" $O/trace_marks_$1.log | tee -a $O/run.log
done
call_finish
