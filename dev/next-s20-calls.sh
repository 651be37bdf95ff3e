#!/usr/bin/env bash
# Written in the nineteenth session (device time spent), for the next one's first call on one
# H200: the landed commit's GPU tests (its last call's were cut by the limit) and its table.
# Build: scripts/build_variant.sh main; scripts/pack_variants.sh main (check .carry/main/GIT_SHA
# against `git log`). Run as `bash dev/next-s20-calls.sh` with carry [".carry/pack.tar.xz"].
#   1. The cases that did not run on the landed kernels: the chain's sweep (now with the
#      epilogue under counter waits too) and the full-size comparisons, then every other GPU test
#      but the soak.
#   2. The table (four presets, batch 1 / 8 / 32), with what is left.
. dev/call_lib.sh
unpack_builds
gpu_tests first $X/main 300 'Chain/*:FullSize/*'
gpu_tests rest $X/main $(left 500) '*:-Overlap.Soak:Chain/*:FullSize/*'
for m in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  bench_rows table_$m $X/main 590 --preset $m --batch 1,8,32 --pdl both --backend both \
    --overlap-streams 1 --overlap-pdl-chain
done
call_finish
