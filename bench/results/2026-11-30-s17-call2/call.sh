#!/usr/bin/env bash
# Seventeenth session, second device call (one H200, <= 9.5 minutes). Builds
# (scripts/pack_variants.sh rope pre): rope = fcce79c + dev/chain-rope-fold.patch (call 1's);
# pre = the same with the fold's first round of cached keys and its norm / RoPE constants loaded
# before the wait (the working tree of this call).
#   1. pre: the fold's kernel tests, DecodeAttention.*, every overlap test.
#   2. Rows alternated pre / rope / pre fold off (chain, batch 1; conventional + PDL beside it).
#   3. pre: the chain's full-size comparisons (four presets, batch 1 and 32, 128 steps).
#   4. pre: compute-sanitizer memcheck and synccheck over the folds' tests and the chain's.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "fold, attention and overlap tests (pre)"
MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 150 $X/pre/megaops_gpu_tests \
  --gtest_filter='RopeFold*:QkvRope*:DecodeAttention.*:MatmulTest.*Fold*:Overlap.*:OverlapDeathTest.*:-Overlap.Soak' \
  --gtest_output=json:$O/tests.json > $O/tests.log 2>&1
echo "tests rc=$?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|tests ran" $O/tests.log | tail -20 | tee -a $O/run.log
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  for m in qwen3-0.6b llama3.2-1b; do
    bench_rows pre_${m}_r$round $X/pre 560 --preset $m $CH
    bench_rows rope_${m}_r$round $X/rope 560 --preset $m $CH
    bench_rows preoff_${m}_r$round $X/pre 560 --preset $m $CH --overlap-fold-rope off
  done
done
for m in llama3.1-8b qwen3-8b; do
  bench_rows pre_$m $X/pre 560 --preset $m $CH
  bench_rows rope_$m $X/rope 560 --preset $m $CH
done
for m in llama3.2-1b qwen3-0.6b; do
  timeout $(left 570) $X/pre/megaops trace --preset $m --batch 1 --streams 1 --pdl-chain \
    --out $O/trace_$m.json > $O/trace_$m.log 2>&1
  grep "step span" $O/trace_$m.log | tee -a $O/run.log
done
log "full-size chain comparisons, $(left 575) s left"
MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 $(left 575) $X/pre/megaops_gpu_tests \
  --gtest_filter='FullSize/OverlapFullSize.*chain*' \
  --gtest_output=json:$O/fullsize_chain.json > $O/fullsize_chain.log 2>&1
echo "fullsize rc=$?" | tee -a $O/run.log
grep -E "overlap .* vs conventional|^\[  (PASSED|FAILED) " $O/fullsize_chain.log | tee -a $O/run.log
F='RopeFold*:MatmulTest.*Fold*:Overlap.PdlChain*'
for tool in memcheck synccheck; do
  lim=$(( $(left 570) / 2 ))
  [ $tool = synccheck ] && lim=$(left 570)
  log "compute-sanitizer $tool over $F ($lim s)"
  api=()
  [ $tool = memcheck ] && api=(--report-api-errors no)
  MEGAOPS_TEST_STEPS=8 timeout -k 5 $lim compute-sanitizer --tool $tool "${api[@]}" --error-exitcode 9 \
    $X/pre/megaops_gpu_tests --gtest_filter="$F" > $O/sanitize_$tool.log 2>&1
  echo "$tool rc=$?" | tee -a $O/run.log
  grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) |tests ran" $O/sanitize_$tool.log | tail -5 | tee -a $O/run.log
done
call_finish
