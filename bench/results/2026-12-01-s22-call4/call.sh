#!/usr/bin/env bash
# Twenty-second session, fourth device call (one H200). Builds (scripts/pack_variants.sh main
# combo): main = f42dc84; combo = main + dev/final-fold.patch (the chain folds the final norm into
# the LM head, which streams at batch 1) + dev/greedy-clusters.patch (greedy sampling as a cluster
# of up to 8 CTAs a row).
#   1. rows alternated, batch 1, conventional + PDL and the chain, main / combo, four presets;
#   2. every GPU test of combo but the soak;
#   3. combo's table (four presets, batch 1 / 8 / 32).
. dev/call_lib.sh
unpack_builds
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  for m in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
    if [ $round = 1 ]; then order="main combo"; else order="combo main"; fi
    for v in $order; do bench_rows ${v}_${m}_r$round $X/$v 560 --preset $m $CH; done
  done
done
gpu_tests combo_all $X/combo 330 '*:-Overlap.Soak'
BENCH_REPEATS=3 table_rows $X/combo 590
call_finish
