#!/usr/bin/env bash
# Twenty-second session, third device call (one H200). Builds (scripts/pack_variants.sh main l2a
# early el2): main = f8aeb7b; l2a = main + dev/stream-l2-ahead.patch (MEGAOPS_STREAM_L2_AHEAD: a
# CTA of the bulk kernel prefetches its rows past the ring into L2 while it waits); early = main +
# dev/pdl-early-trigger.patch; el2 = early + l2a.
#   0. l2a's matmul tests (the prefetch must not change a bit);
#   1. rows alternated, batch 1, conventional + PDL and the chain: main / l2a at several budgets
#      / early / el2 on the four presets (the traces of -call1 / -call2: ~3 us of idle HBM while
#      attention runs, which the 8B's O CTAs could fill past their ring).
. dev/call_lib.sh
unpack_builds
gpu_tests l2a_matmul $X/l2a 150 'MatmulTest.*'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  for m in llama3.2-1b qwen3-0.6b; do
    bench_rows main_${m}_r$round $X/main 590 --preset $m $CH
    MEGAOPS_STREAM_L2_AHEAD=256 bench_rows l2a256_${m}_r$round $X/l2a 590 --preset $m $CH
    bench_rows early_${m}_r$round $X/early 590 --preset $m $CH
    MEGAOPS_STREAM_L2_AHEAD=256 bench_rows el2_${m}_r$round $X/el2 590 --preset $m $CH
  done
  m=llama3.1-8b
  bench_rows main_${m}_r$round $X/main 590 --preset $m $CH
  for kb in 64 128 384; do
    MEGAOPS_STREAM_L2_AHEAD=$kb bench_rows l2a${kb}_${m}_r$round $X/l2a 590 --preset $m $CH
  done
  bench_rows early_${m}_r$round $X/early 590 --preset $m $CH
  MEGAOPS_STREAM_L2_AHEAD=128 bench_rows el2_${m}_r$round $X/el2 590 --preset $m $CH
done
m=qwen3-8b
bench_rows main_${m}_r1 $X/main 590 --preset $m $CH
MEGAOPS_STREAM_L2_AHEAD=128 bench_rows l2a128_${m}_r1 $X/l2a 590 --preset $m $CH
bench_rows early_${m}_r1 $X/early 590 --preset $m $CH
MEGAOPS_STREAM_L2_AHEAD=128 bench_rows el2_${m}_r1 $X/el2 590 --preset $m $CH
call_finish
