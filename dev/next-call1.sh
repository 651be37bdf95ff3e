#!/usr/bin/env bash
# The next session's first device call (dev/README "Next GPU session" items 1-2), one H200, ~8 minutes.
# Carry .carry/pack.tar.xz with two builds:
#   scripts/build_variant.sh main
#   scripts/build_variant.sh chain dev/overlap-pdl-chain.patch
#   scripts/pack_variants.sh main chain
# Everything in $OUT/all.tgz.
#   1. chain: the overlap tests with the new Overlap.PdlChainMatchesConventional (bit-equal to the
#      conventional step with PDL-launched own kernels waiting on counters, eager and captured,
#      with producer delays; rejected at W > 1), and the full-size comparisons of the small models.
#   2. The step, rows alternated twice, batch 1 and 8, llama3.2-1b, qwen3-0.6b, llama3.1-8b:
#      main conventional PDL off / on and overlap at W = 1 and 3; chain overlap at W = 1 with
#      MEGAOPS_OVERLAP_PDL_CHAIN=1. What must show: chain bit-equal (1) and, to land, faster than
#      the overlap step at W = 1; issue 3 wants it >= 1.10x faster than conventional + PDL.
#   3. perf-notes item 29 (~1 minute): llama3.1-8b batch 1 PDL off after graph prefills, in three
#      fresh processes of one timed repeat each (is the first graph-prefill repeat of every process
#      fast?).
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x
nvidia-smi --query-gpu=name,driver_version --format=csv | tee -a $O/run.log
log "chain tests"
TEST_FILTER='Overlap.*:Presets/OverlapVsConventional.*:FullSize/OverlapFullSize.*1b*:FullSize/OverlapFullSize.*0_6b*' \
  MEGAOPS_WATCHDOG_MS=2000 OUT=$O/tests BIN=$X/chain timeout 240 scripts/gpu_run.sh tests \
  > $O/tests_chain.log 2>&1; echo "rc $?" | tee -a $O/run.log
tail -8 $O/tests_chain.log | tee -a $O/run.log
for r in 1 2; do
  for p in llama3.2-1b qwen3-0.6b llama3.1-8b; do
    bench_rows main_${p}_r$r $X/main 560 --preset $p --batch 1,8 --pdl both --backend both
    bench_rows main_w1_${p}_r$r $X/main 560 --preset $p --batch 1,8 --backend overlap \
      --overlap-streams 1
    MEGAOPS_OVERLAP_PDL_CHAIN=1 bench_rows chain_${p}_r$r $X/chain 560 --preset $p --batch 1,8 \
      --backend overlap --overlap-streams 1
  done
done
for i in 1 2 3; do
  BENCH_REPEATS=1 bench_rows graph_once${i}_llama3.1-8b $X/main 590 --preset llama3.1-8b --batch 1 \
    --pdl off --prefill graph
done
call_finish
