#!/usr/bin/env bash
# Written in the twenty-first session (device time spent), for the next one's first call on one
# H200. Build: scripts/build_variant.sh main; scripts/build_variant.sh ksplit
# dev/stream-ksplit.patch; scripts/build_variant.sh three dev/qkvo-three-ctas.patch;
# scripts/pack_variants.sh main ksplit three (check each GIT_SHA against `git log`). Run as
# `bash dev/next-s22-calls.sh` with carry [".carry/pack.tar.xz"].
#   0. the k split's GPU tests (its own and every MatmulTest: the patch touches the bulk kernel's
#      static schedule) and racecheck over its test;
#   1. bench-matmul of the 8B / 1B shapes, the k split forced per shape (S = 2, 3) against main;
#   2. rows alternated, batch 1, main / ksplit with the split on the 8B's down, QKV and O
#      (MEGAOPS_STREAM_KSPLIT_SHAPES), and on the 1B's down;
#   3. three CTAs an SM for the 8B's QKV / O (`three`: item 38's two-an-SM rule was measured on
#      the misaligned ring): bench-matmul and rows against main.
. dev/call_lib.sh
unpack_builds
gpu_tests ksplit_matmul $X/ksplit 150 'MatmulTest.*'
racecheck_tests $X/ksplit 'MatmulTest.StreamKSplitMatchesReference' 120
for p in llama3.1-8b llama3.2-1b; do
  for S in 1 2 3; do
    case $p in
      llama3.1-8b) SH="4096x14336:$S,6144x4096:$S,4096x4096:$S" ;;
      llama3.2-1b) SH="2048x8192:$S,3072x2048:$S,2048x2048:$S" ;;
    esac
    log "bench-matmul ksplit S=$S $p"
    MEGAOPS_STREAM_KSPLIT_SHAPES=$SH MEGAOPS_GIT_SHA=$(cat $X/ksplit/GIT_SHA) timeout 60 \
      $X/ksplit/megaops bench-matmul --preset $p --batch 1 --paths read,stream-bulk --pdl \
      --json $O/mm_S${S}_$p.json >$O/mm_S${S}_$p.log 2>&1
    grep -E "proj|head" $O/mm_S${S}_$p.log | tee -a $O/run.log
  done
done
CH="--batch 1 --pdl both --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  bench_rows main_8b_r$round $X/main 560 --preset llama3.1-8b $CH
  MEGAOPS_STREAM_KSPLIT_SHAPES=4096x14336:2,6144x4096:2,4096x4096:2 \
    bench_rows ks_8b_r$round $X/ksplit 570 --preset llama3.1-8b $CH
  bench_rows main_1b_r$round $X/main 580 --preset llama3.2-1b $CH
  MEGAOPS_STREAM_KSPLIT_SHAPES=2048x8192:2 bench_rows ks_1b_r$round $X/ksplit 590 --preset llama3.2-1b $CH
done
log "bench-matmul three llama3.1-8b"
MEGAOPS_GIT_SHA=$(cat $X/three/GIT_SHA) timeout 60 $X/three/megaops bench-matmul --preset llama3.1-8b \
  --batch 1 --paths stream-bulk --pdl --json $O/mm_three.json >$O/mm_three.log 2>&1
grep -E "proj|head" $O/mm_three.log | tee -a $O/run.log
for round in 1 2; do
  for m in llama3.1-8b qwen3-8b; do
    bench_rows main_${m}_t$round $X/main 560 --preset $m $CH
    bench_rows three_${m}_t$round $X/three 580 --preset $m $CH
  done
done
call_finish
