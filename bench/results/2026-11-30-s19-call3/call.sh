#!/usr/bin/env bash
# Nineteenth session, third device call (one H200). Builds (scripts/pack_variants.sh main c19):
# main = f6161d6; c19 = the working tree after -call2: the long-row cap of two CTAs an SM only for
# n <= 8192 (bulk-long-k-two-ctas.patch reworked), the SwiGLU epilogue (silu-epilogue.patch, its
# test's oracle fixed) on by default in the chain, and the chain's own dispatch putting the
# 8B-class MLP on the bulk kernel (matmul_chain_dispatch_path).
#   1. Rows, batch 1, conventional + PDL / chain: main against c19 (default: epilogue) and c19
#      with SiLU·mul folded into down instead (--overlap-fold-silu on), the 8B presets; main
#      against c19 on the small presets, two rounds.
#   2. Every GPU test of c19 but the soak.
. dev/call_lib.sh
unpack_builds
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for m in llama3.1-8b qwen3-8b; do
  bench_rows main_$m $X/main 200 --preset $m $CH
  bench_rows c19_$m $X/c19 200 --preset $m $CH
  bench_rows c19down_$m $X/c19 200 --preset $m $CH --overlap-fold-silu on
done
for round in 1 2; do
  for m in llama3.2-1b qwen3-0.6b; do
    bench_rows main_${m}_r$round $X/main 240 --preset $m $CH
    bench_rows c19_${m}_r$round $X/c19 240 --preset $m $CH
  done
done
gpu_tests c19_all $X/c19 $(left 585) '*:-Overlap.Soak'
call_finish
