#!/usr/bin/env bash
# Ninth session, device call 3 (2026-11-30), one H200, ~9 minutes: validation of b6edc07 (the
# bulk streaming kernel in the default dispatch, the overlap step's per-step split). Carry
# .carry/pack.tar.xz with `land`. Everything in $OUT/all.tgz.
#   1. Every GPU test (the overlap executor's included).
#   2. The bench of the four presets, batch 1, 8 and 32, conventional PDL off / on and overlap.
#   3. memcheck and racecheck over the streaming kernel's tests and the tiny conventional models.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
B=.carry/x/land
log "GPU tests"
OUT=$O/tests BIN=$B TEST_FILTER='*' MEGAOPS_WATCHDOG_MS=2000 timeout $(left 300) \
  scripts/gpu_run.sh tests > $O/run_tests.log 2>&1
tail -6 $O/run_tests.log | tee -a $O/run.log
grep -hE "^\[  FAILED|PASSED" $O/tests/*.log 2>/dev/null | tail -8 | tee -a $O/run.log
for p in llama3.1-8b qwen3-8b llama3.2-1b qwen3-0.6b; do
  log "bench $p"
  MEGAOPS_GIT_SHA=$(cat $B/GIT_SHA) timeout $(left 580) $B/megaops bench --preset $p \
    --batch 1,8,32 --prompt 32 --gen 128 --repeats 3 --pdl both --backend both \
    --json $O/bench_$p.json 2>&1 | grep -E "^(backend|conventional|overlap)" | tee -a $O/run.log
done
F='MatmulTest.Stream*:MatmulTest.PdlChain*:MatmulTest.DispatchMatchesReference:Conventional.GraphEagerAndPdlAgree:Presets/ConventionalVsOracle.*'
for tool in memcheck racecheck; do
  log "compute-sanitizer $tool"
  timeout $(left 590) compute-sanitizer --tool $tool --print-limit 20 $B/megaops_gpu_tests \
    --gtest_filter="$F" > $O/sanitize_$tool.log 2>&1
  echo "rc $?" >> $O/sanitize_$tool.log
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|PASSED|FAILED|rc " $O/sanitize_$tool.log | tail -6 | tee -a $O/run.log
done
call_finish
