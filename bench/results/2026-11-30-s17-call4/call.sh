#!/usr/bin/env bash
# Seventeenth session, fourth device call (one H200, ~2 minutes). Build (scripts/pack_variants.sh
# main): 26d72c3. Question: the 1B's down projection (k = 8192: 32 KB of fp32 x + a 64 KB ring)
# cannot be resident beside two gate_up CTAs (2 x 73 KB) on an SM, so it starts only as they end
# (its handoff 1.42 us against 0.67-0.75 for the other ops, -call2's trace). Does a 3-slot ring
# (81 KB) or a 2-slot one, for every bulk launch (MEGAOPS_STREAM_STAGES), shorten the chain's
# step? Rows alternated, chain at batch 1 with conventional + PDL beside it.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
B=$X/main
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  for m in llama3.2-1b qwen3-0.6b; do
    bench_rows def_${m}_r$round $B 170 --preset $m $CH
    MEGAOPS_STREAM_STAGES=3 bench_rows s3_${m}_r$round $B 170 --preset $m $CH
  done
done
for m in llama3.2-1b qwen3-0.6b; do
  MEGAOPS_STREAM_STAGES=2 bench_rows s2_${m} $B 170 --preset $m $CH
done
call_finish
