#!/usr/bin/env bash
# Thirteenth session, device call 4, one H200, ~6 minutes. .carry/pack.tar.xz holds `main`,
# `chain` (main + dev/overlap-pdl-chain.patch) and `chaincarve` (chain +
# dev/overlap-chain-carveout.patch). Everything in $OUT/all.tgz.
#   1. Timings, rows alternated, two rounds (the 8B one): batch 1 and 8, conventional with PDL
#      (main), the PDL chain at W = 1 (chain) and the chain with the conventional step's carveouts
#      (chaincarve, MEGAOPS_OVERLAP_CHAIN_CARVEOUT=1).
#   2. chaincarve's chain tests with the carveouts on.
#   3. One traced step of the chain (llama3.2-1b, batch 1, W = 1) and its per-op report: where the
#      chain's step goes next to the conventional one's.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
export MEGAOPS_OVERLAP_PDL_CHAIN=1
for r in 1 2; do
  for p in llama3.2-1b qwen3-0.6b llama3.1-8b; do
    bt=1,8
    [ $p = llama3.1-8b ] && bt=1
    [ $p = llama3.1-8b ] && [ $r = 2 ] && continue
    MEGAOPS_OVERLAP_PDL_CHAIN= bench_rows main_${p}_r$r $X/main 560 --preset $p --batch $bt --pdl on
    bench_rows chain_${p}_r$r $X/chain 560 --preset $p --batch $bt --backend overlap --overlap-streams 1
    MEGAOPS_OVERLAP_CHAIN_CARVEOUT=1 bench_rows chaincarve_${p}_r$r $X/chaincarve 560 --preset $p \
      --batch $bt --backend overlap --overlap-streams 1
  done
done
log "chaincarve tests"
MEGAOPS_OVERLAP_CHAIN_CARVEOUT=1 TEST_FILTER='Overlap.PdlChain*:OverlapDeathTest.*' \
  MEGAOPS_WATCHDOG_MS=2000 OUT=$O/t_chaincarve BIN=$X/chaincarve timeout -k 5 $(left 560) \
  scripts/gpu_run.sh tests > $O/tests_chaincarve.log 2>&1
tail -4 $O/tests_chaincarve.log | tee -a $O/run.log
log "trace of the chain"
mkdir -p $O/trace
timeout -k 5 $(left 580) $X/chain/megaops trace --preset llama3.2-1b --batch 1 --streams 1 \
  --out $O/trace/trace_chain_llama3.2-1b.json > $O/trace/trace.log 2>&1
python3 scripts/trace_report.py $O/trace/trace_chain_llama3.2-1b.json 2>&1 | tail -25 | tee -a $O/run.log
call_finish
