#!/usr/bin/env bash
# The next session's first device call (dev/README "Next GPU session" step 4 and the two bulk-kernel
# patches), one H200, ~10 minutes (split the rows4 part into its own call if the first parts run
# long). Carry .carry/pack.tar.xz with three builds:
#   scripts/build_variant.sh main
#   scripts/build_variant.sh delays dev/stream-bulk-delays.patch
#   scripts/build_variant.sh threadrel dev/stream-bulk-thread-release.patch
#   scripts/build_variant.sh rows4 dev/stream-bulk-rows4.patch
#   scripts/pack_variants.sh main delays threadrel rows4
# Everything in $OUT/all.tgz.
#   1. delays: its injected-delay test and the stream tests; threadrel: the stream tests.
#   2. racecheck over MatmulTest.Stream* with main and threadrel (is racecheck clean when every
#      consumer thread releases its own loads?).
#   3. bench-matmul --paths stream-bulk, three presets, and the 1B / 0.6B / 8B steps PDL off / on,
#      main against both patches, rows alternated (what the delay hooks and 256 arrivals cost).
#   4. rows4: its stream tests with MEGAOPS_STREAM_BULK_ROWS=4, and bench-matmul of the bulk
#      kernel at 2-8 slots with 4 x 2048 stages against 8 x 1024 (same binary).
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x
log "tests"
timeout 200 $X/delays/megaops_gpu_tests --gtest_filter='MatmulTest.Stream*' > $O/tests_delays.log 2>&1
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $O/tests_delays.log | tee -a $O/run.log
timeout 120 $X/threadrel/megaops_gpu_tests --gtest_filter='MatmulTest.Stream*:MatmulTest.PdlChain*' \
  > $O/tests_threadrel.log 2>&1
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $O/tests_threadrel.log | tee -a $O/run.log
for b in main threadrel; do
  log "racecheck $b"
  timeout 150 compute-sanitizer --tool racecheck --print-limit 10 $X/$b/megaops_gpu_tests \
    --gtest_filter='MatmulTest.StreamBulk*:MatmulTest.DispatchMatchesReference' > $O/race_$b.log 2>&1
  grep -E "RACECHECK SUMMARY|PASSED|FAILED" $O/race_$b.log | tail -3 | tee -a $O/run.log
done
for b in main delays threadrel; do
  for p in llama3.1-8b llama3.2-1b qwen3-0.6b; do
    log "bench-matmul $b $p"
    timeout $(left 300) $X/$b/megaops bench-matmul --preset $p --batch 1 --paths stream-bulk \
      --json $O/bm_${b}_$p.json 2>&1 | grep -E "^(qkv|o_proj|gate|down|lm)" | tee -a $O/run.log
  done
done
for r in 1 2; do
  for b in main delays threadrel; do
    for p in llama3.2-1b qwen3-0.6b llama3.1-8b; do
      log "bench $b $p r$r"
      MEGAOPS_GIT_SHA=$(cat $X/$b/GIT_SHA) timeout $(left 560) $X/$b/megaops bench --preset $p \
        --batch 1 --prompt 32 --gen 128 --repeats 3 --pdl both --json $O/bench_${b}_${p}_r$r.json 2>&1 |
        grep -E "^$p" | tee -a $O/run.log
    done
  done
done
log "rows4 tests"
MEGAOPS_STREAM_BULK_ROWS=4 timeout 150 $X/rows4/megaops_gpu_tests --gtest_filter='MatmulTest.Stream*' \
  > $O/tests_rows4.log 2>&1
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $O/tests_rows4.log | tee -a $O/run.log
for r in 1 2; do
  for rows in 8 4; do
    for p in llama3.1-8b llama3.2-1b; do
      log "bench-matmul rows $rows $p r$r"
      MEGAOPS_STREAM_BULK_ROWS=$rows timeout $(left 590) $X/rows4/megaops bench-matmul --preset $p \
        --batch 1 --paths stream-bulk --stages 2,4,6,8 --json $O/bm_rows${rows}_${p}_r$r.json 2>&1 |
        grep -E "^(qkv|o_proj|gate|down|lm)" | tee -a $O/run.log
    done
  done
done
call_finish
