#!/usr/bin/env bash
# Sixteenth session, first device call (one H200, ~8 minutes). Builds (scripts/build_variant.sh,
# then scripts/pack_variants.sh main hw hwet):
#   main = HEAD;  hw = HEAD + dev/chain-hw-wait.patch;  hwet = hw + dev/pdl-early-trigger.patch
# Question: is the PDL chain's deficit against conventional + PDL (1.013 vs 0.925 ms on
# llama3.2-1b, 1.037 vs 0.832 on qwen3-0.6b) the counter handoff itself? hw keeps the chain's
# kernels and PDL launches but waits on the grid before (griddepcontrol.wait) where the chain
# waits on its counter (MEGAOPS_CHAIN_HW_WAIT=1). Rows alternated, conventional + PDL in each row.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "chain tests under the hardware wait"
MEGAOPS_CHAIN_HW_WAIT=1 timeout 60 $X/hw/megaops_gpu_tests \
  --gtest_filter='Overlap.PdlChainMatchesConventional:Overlap.ConsumerFirstIssueOrder' > $O/hw_tests.log 2>&1
tail -n 4 $O/hw_tests.log | tee -a $O/run.log
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for r in 1 2; do
  for m in qwen3-0.6b llama3.2-1b; do
    bench_rows main_${m}_$r $X/main 500 --preset $m $CH
    MEGAOPS_CHAIN_HW_WAIT=1 bench_rows hw_${m}_$r $X/hw 500 --preset $m $CH
    MEGAOPS_CHAIN_HW_WAIT=1 bench_rows hwet_${m}_$r $X/hwet 500 --preset $m $CH
  done
done
for m in qwen3-0.6b llama3.2-1b; do
  MEGAOPS_TILE_WAIT_MAX_NS=0 bench_rows nosleep_${m} $X/main 500 --preset $m $CH
done
for m in qwen3-0.6b llama3.2-1b; do
  log "trace $m chain / chain-hw"
  timeout $(left 520) $X/main/megaops trace --preset $m --batch 1 --streams 1 --pdl-chain \
    --out $O/trace_chain_$m.json > $O/trace_chain_$m.log 2>&1
  MEGAOPS_CHAIN_HW_WAIT=1 timeout $(left 520) $X/hw/megaops trace --preset $m --batch 1 --streams 1 \
    --pdl-chain --out $O/trace_hw_$m.json > $O/trace_hw_$m.log 2>&1
  head -n 1 $O/trace_chain_$m.log $O/trace_hw_$m.log | tee -a $O/run.log
done
bench_rows main_8b $X/main 560 --preset llama3.1-8b $CH
MEGAOPS_CHAIN_HW_WAIT=1 bench_rows hw_8b $X/hw 560 --preset llama3.1-8b $CH
call_finish
