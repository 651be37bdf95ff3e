#!/usr/bin/env bash
# GPU 0 of the tenth session's calls 2-3 (call.sh): experiments with timings, then racecheck over
# the whole sanitizer filter on main. Output in $R/exp (R from call.sh).
set -u
X=.carry/x
E=$R/exp
mkdir -p $E
log() { echo "== $* ($(date +%T))" | tee -a $E/run.log; }
sha() { cat $X/$1/GIT_SHA; }
# 1. main: the stream tests (the injected-delay test on the per-thread release).
log "stream tests main"
timeout 200 $X/main/megaops_gpu_tests --gtest_filter='MatmulTest.Stream*:MatmulTest.PdlChain*:MatmulTest.Dispatch*' \
  > $E/tests_main.log 2>&1; echo "rc $?" | tee -a $E/run.log
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $E/tests_main.log | tee -a $E/run.log
# 2. The step split's hang (dev/overlap-step-carveout.patch): the split per batch as chosen, then
#    one split for every batch (the largest chosen, then the smallest, then 100 = maximum shared).
log "carvediag auto"
MEGAOPS_OVERLAP_CARVEOUT_LOG=1 MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 90 $X/carvediag/megaops_gpu_tests \
  --gtest_filter='Overlap.BatchSwitchAfterFiveHundredStepsFullSize' > $E/carve_auto.log 2>&1
echo "rc $?" | tee -a $E/run.log
grep -E "^carveout|watchdog|^\[  (PASSED|FAILED) " $E/carve_auto.log | sort -u | tee -a $E/run.log
vals=$(grep -oE "^carveout b=[0-9]+: -?[0-9]+%" $E/carve_auto.log | grep -oE "[-0-9]+%$" | tr -d % | sort -n | uniq)
hi=$(echo "$vals" | tail -1); lo=$(echo "$vals" | head -1)
for v in $hi $lo 100; do
  [ "$v" -ge 1 ] 2>/dev/null || continue
  log "carvediag forced $v"
  MEGAOPS_OVERLAP_STEP_CARVEOUT=$v MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 90 $X/carvediag/megaops_gpu_tests \
    --gtest_filter='Overlap.BatchSwitchAfterFiveHundredStepsFullSize' > $E/carve_$v.log 2>&1
  echo "rc $?" | tee -a $E/run.log
  grep -E "watchdog|^\[  (PASSED|FAILED) " $E/carve_$v.log | sort -u | tee -a $E/run.log
done
# 3. rows4 (dev/stream-bulk-rows4.patch): its stream tests at 4 x 2048, then bench-matmul of the
#    bulk kernel at 2-8 slots, 8 x 1024 against 4 x 2048 stages (same binary), rows alternated.
log "rows4 tests"
MEGAOPS_STREAM_BULK_ROWS=4 timeout 150 $X/rows4/megaops_gpu_tests --gtest_filter='MatmulTest.Stream*' \
  > $E/tests_rows4.log 2>&1; echo "rc $?" | tee -a $E/run.log
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $E/tests_rows4.log | tee -a $E/run.log
for r in 1 2; do
  for rows in 8 4; do
    for p in llama3.1-8b llama3.2-1b; do
      log "bench-matmul rows $rows $p r$r"
      MEGAOPS_GIT_SHA=$(sha rows4) MEGAOPS_STREAM_BULK_ROWS=$rows timeout 120 $X/rows4/megaops bench-matmul \
        --preset $p --batch 1 --paths stream-bulk,cublaslt --stages 2,4,6,8 \
        --json $E/bm_rows${rows}_${p}_r$r.json > $E/bm_rows${rows}_${p}_r$r.log 2>&1
      grep -E "^(qkv|o_proj|gate|down|lm)" $E/bm_rows${rows}_${p}_r$r.log | tee -a $E/run.log
    done
  done
done
# 4. The overlap step with the streaming kernels: the bulk kernel (default) against the ring, and
#    batch 1, rows alternated.
for r in 1 2; do
  for p in llama3.2-1b qwen3-0.6b llama3.1-8b; do
    for v in bulk ring; do
      kern=${v%%:*}; st=${v#*:}; [ "$st" = "$v" ] && st=
      log "overlap $p $v r$r"
      MEGAOPS_GIT_SHA=$(sha main) MEGAOPS_STREAM_KERNEL=$kern MEGAOPS_STREAM_STAGES=$st timeout 120 \
        $X/main/megaops bench --preset $p --batch 1 --prompt 32 --gen 128 --repeats 3 --backend overlap \
        --json $E/ovl_${p}_${kern}${st}_r$r.json > $E/ovl_${p}_${kern}${st}_r$r.log 2>&1
      grep -E "^overlap" $E/ovl_${p}_${kern}${st}_r$r.log | tee -a $E/run.log
    done
  done
done
touch $E/exp.done
# 5. racecheck over the whole sanitizer filter on main (the per-thread release).
log "racecheck"
OUT=$E/race BIN=$X/main SANITIZE_TOOLS=racecheck SANITIZE_LIMIT=780 scripts/gpu_run.sh sanitize \
  > $E/run_race.log 2>&1
tail -5 $E/run_race.log | tee -a $E/run.log
