#!/usr/bin/env bash
# Tenth session, first device call (one H200, ~8 minutes). Carry .carry/pack.tar.xz with
#   scripts/build_variant.sh main
#   scripts/build_variant.sh delays dev/stream-bulk-delays.patch
#   scripts/build_variant.sh threadrel dev/stream-bulk-thread-release.patch
#   scripts/build_variant.sh carve dev/overlap-step-carveout.patch
#   scripts/pack_variants.sh main delays threadrel carve
#   1. main: the overlap filter (27 tests, with the batch-switch test never run on a GPU before).
#   2. carve: the batch-switch test alone (does it catch the hang of -s9-call3 / -call4?).
#   3. delays: the bulk kernel's injected-delay test and the stream tests; threadrel: stream tests.
#   4. racecheck of the bulk kernel's tests, main against threadrel.
#   5. bench-matmul --paths stream-bulk, main against threadrel, rows alternated.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x
cp $X/main/GIT_SHA $O/ 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "overlap tests main"
MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 240 $X/main/megaops_gpu_tests \
  --gtest_filter='Overlap.*:OverlapDeathTest.*:Presets/Overlap*:FullSize/Overlap*' \
  > $O/overlap_main.log 2>&1; echo "rc $?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|BatchSwitch" $O/overlap_main.log | tee -a $O/run.log
log "batch switch carve"
MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 90 $X/carve/megaops_gpu_tests \
  --gtest_filter='Overlap.BatchSwitchAfterFiveHundredStepsFullSize' > $O/switch_carve.log 2>&1
echo "rc $?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|watchdog|step" $O/switch_carve.log | head -8 | tee -a $O/run.log
log "stream tests delays"
timeout 200 $X/delays/megaops_gpu_tests --gtest_filter='MatmulTest.Stream*' > $O/tests_delays.log 2>&1
echo "rc $?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $O/tests_delays.log | tee -a $O/run.log
log "stream tests threadrel"
timeout 120 $X/threadrel/megaops_gpu_tests --gtest_filter='MatmulTest.Stream*:MatmulTest.PdlChain*:MatmulTest.Dispatch*' \
  > $O/tests_threadrel.log 2>&1
echo "rc $?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $O/tests_threadrel.log | tee -a $O/run.log
for b in threadrel main; do
  log "racecheck $b"
  timeout 100 compute-sanitizer --tool racecheck --print-limit 10 $X/$b/megaops_gpu_tests \
    --gtest_filter='MatmulTest.StreamBulk*' > $O/race_$b.log 2>&1
  echo "rc $?" | tee -a $O/run.log
  grep -E "RACECHECK SUMMARY|PASSED|FAILED" $O/race_$b.log | tail -3 | tee -a $O/run.log
done
for r in 1 2; do
  for b in main threadrel; do
    for p in llama3.1-8b llama3.2-1b; do
      log "bench-matmul $b $p r$r"
      MEGAOPS_GIT_SHA=$(cat $X/$b/GIT_SHA) timeout $(left 560) $X/$b/megaops bench-matmul --preset $p \
        --batch 1 --paths stream-bulk --json $O/bm_${b}_${p}_r$r.json > $O/bm_${b}_${p}_r$r.log 2>&1
      grep -E "^(qkv|o_proj|gate|down|lm)" $O/bm_${b}_${p}_r$r.log | tee -a $O/run.log
    done
  done
done
call_finish
