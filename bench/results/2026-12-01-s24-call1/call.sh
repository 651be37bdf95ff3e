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
# alternated_rows entries LABEL@BUILD@VAR=value: the knobs build under several environments.
S=MEGAOPS_STREAM_STAGES_FOR E=MEGAOPS_CHAIN_EARLY_TRIGGER
alternated_rows "main knobs down3@knobs@$S=2048x8192:3,1024x3072:3 qkv3@knobs@$S=3072x2048:3,4096x1024:3
  eo@knobs@$E=o_proj ea@knobs@$E=attention eq@knobs@$E=qkv_proj ed@knobs@$E=down_proj" \
  "llama3.2-1b qwen3-0.6b" 400 $CH
alternated_rows "main knobs eo@knobs@$E=o_proj down2@knobs@$S=4096x14336:2" llama3.1-8b 400 $CH
MEGAOPS_CHAIN_EARLY_TRIGGER=o_proj chain_trace trace_marks_eo $X/knobsmarks llama3.2-1b 410
MEGAOPS_STREAM_STAGES_FOR=2048x8192:3 chain_trace trace_marks_down3 $X/knobsmarks llama3.2-1b 410
call_finish
