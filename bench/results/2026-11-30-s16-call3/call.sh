#!/usr/bin/env bash
# Sixteenth session, third device call (one H200, ~8 minutes). Builds (scripts/pack_variants.sh
# main3 pw): main3 = 97030d8 (chain: grid waits, norms and SiLU·mul folded; 1B gate_up on the
# bulk kernel under PDL); pw = main3 + dev/stream-prewait.patch (MEGAOPS_STREAM_PREWAIT=N: bulk
# kernel stages issued before its wait).
#   1. The table: four presets, batch 1 / 8 / 32, conventional PDL off / on and the chain.
#   2. Batch 1 ablations on the small models: SiLU fold off; stages before the wait 0 / 1 / 2.
#   3. A trace of the chain (llama3.2-1b, qwen3-0.6b).
#   4. Every GPU test (Soak excluded) with what time is left.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for m in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  bench_rows table_$m $X/main3 560 --preset $m --batch 1,8,32 --pdl both --backend both \
    --overlap-streams 1 --overlap-pdl-chain
done
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for m in qwen3-0.6b llama3.2-1b; do
  bench_rows nosilu_$m $X/main3 560 --preset $m $CH --overlap-fold-silu off
  bench_rows main_$m $X/main3 560 --preset $m $CH
  for n in 0 1 2; do
    MEGAOPS_STREAM_PREWAIT=$n bench_rows pw${n}_$m $X/pw 560 --preset $m $CH
  done
done
for m in llama3.2-1b qwen3-0.6b; do
  timeout $(left 570) $X/main3/megaops trace --preset $m --batch 1 --streams 1 --pdl-chain \
    --out $O/trace_$m.json > $O/trace_$m.log 2>&1
  grep "step span" $O/trace_$m.log | tee -a $O/run.log
done
log "GPU tests (all but the soak), $(left 560) s left"
MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 $(left 560) $X/main3/megaops_gpu_tests --gtest_filter='-Overlap.Soak' \
  --gtest_output=json:$O/tests.json > $O/tests.log 2>&1
echo "tests rc=$?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|tests ran" $O/tests.log | tail -20 | tee -a $O/run.log
tail -n 3 $O/tests.log | tee -a $O/run.log
call_finish
