#!/usr/bin/env bash
# Seventeenth session, first device call (one H200, <= 9.5 minutes). Build (scripts/pack_variants.sh
# rope): main fcce79c + dev/chain-rope-fold.patch (qkv_rope folded into the chain's decode
# attention at batches 1-2, `--overlap-fold-rope on|off`), built on main for sm_90a.
#   1. The fold's kernel test, the fold tests of the matmuls, every overlap test (1e466a7 touched
#      them and they had not run on a GPU since).
#   2. Rows alternated fold on / off (chain; conventional + PDL beside it), batch 1 and 2: the
#      small models twice, the 8B once.
#   3. A trace of the chain with the fold (llama3.2-1b, qwen3-0.6b).
#   4. Every GPU test (Soak excluded) with what is left.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
B=$X/rope
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "fold tests and overlap tests"
MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 150 $B/megaops_gpu_tests \
  --gtest_filter='RopeFold*:MatmulTest.*Fold*:MatmulDispatch.*:Overlap.*:OverlapDeathTest.*:-Overlap.Soak' \
  --gtest_output=json:$O/fold_tests.json > $O/fold_tests.log 2>&1
echo "fold tests rc=$?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|tests ran" $O/fold_tests.log | tail -20 | tee -a $O/run.log
CH="--pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  for m in qwen3-0.6b llama3.2-1b; do
    for f in on off; do
      bench_rows rope${f}_${m}_r$round $B 560 --preset $m --batch 1,2 $CH --overlap-fold-rope $f
    done
  done
done
for m in llama3.1-8b qwen3-8b; do
  for f in on off; do
    bench_rows rope${f}_$m $B 560 --preset $m --batch 1 $CH --overlap-fold-rope $f
  done
done
for m in llama3.2-1b qwen3-0.6b; do
  timeout $(left 570) $B/megaops trace --preset $m --batch 1 --streams 1 --pdl-chain \
    --out $O/trace_$m.json > $O/trace_$m.log 2>&1
  grep "step span" $O/trace_$m.log | tee -a $O/run.log
done
log "GPU tests (all but the soak), $(left 575) s left"
MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 $(left 575) $B/megaops_gpu_tests --gtest_filter='-Overlap.Soak' \
  --gtest_output=json:$O/tests.json > $O/tests.log 2>&1
echo "tests rc=$?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|tests ran" $O/tests.log | tail -20 | tee -a $O/run.log
tail -n 3 $O/tests.log | tee -a $O/run.log
call_finish
