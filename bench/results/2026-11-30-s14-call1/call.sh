#!/usr/bin/env bash
# Fourteenth session, device call 1, one H200, ~8 minutes. Builds (scripts/build_variant.sh):
# `main` = 86d93a8 (90fcdea's folds, not yet run on a GPU), `chunk` = main +
# dev/overlap-chunk-waits.patch (x of every complete chunk loaded in one pass, not yet run),
# `steps` = main + dev/bench-step-times.patch; scripts/pack_variants.sh main chunk steps.
#   1. Every GPU test and the HF comparison on main.
#   2. The chain with and without K-chunk waits, batch 1, rows alternated, two rounds, beside
#      conventional + PDL; the chunk waits' tests.
#   3. Perf-notes item 29: every decode step's time, llama3.1-8b batch 1 PDL off, graph prefill
#      and layer prefill, four repeats each.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "chunk tests"
TEST_FILTER='Overlap.PdlChain*:OverlapDeathTest.*:Overlap.RandomDelays' \
  MEGAOPS_WATCHDOG_MS=2000 OUT=$O/tests_chunk BIN=$X/chunk timeout -k 5 120 scripts/gpu_run.sh tests \
  > $O/tests_chunk.log 2>&1
tail -4 $O/tests_chunk.log | tee -a $O/run.log
for r in 1 2; do
  for p in llama3.2-1b qwen3-0.6b; do
    bench_rows conv_${p}_r$r $X/main 560 --preset $p --batch 1 --pdl on
    bench_rows chain_${p}_r$r $X/chunk 560 --preset $p --batch 1 --backend overlap \
      --overlap-streams 1 --overlap-pdl-chain
    bench_rows chunk_${p}_r$r $X/chunk 560 --preset $p --batch 1 --backend overlap \
      --overlap-streams 1 --overlap-pdl-chain --overlap-chunk-waits
  done
done
for pf in graph layer; do
  BENCH_REPEATS=4 bench_rows steps_${pf} $X/steps 560 --preset llama3.1-8b --batch 1 --pdl off \
    --prefill $pf --step-times
done
log "all GPU tests + HF on main"
TEST_FILTER='*' MEGAOPS_WATCHDOG_MS=2000 OUT=$O/tests BIN=$X/main timeout -k 5 $(left 585) \
  scripts/gpu_run.sh tests hf > $O/tests.log 2>&1
grep -E "PASSED|FAILED|worst|rror|status" $O/tests.log | tail -12 | tee -a $O/run.log
call_finish
