#!/usr/bin/env bash
# Twentieth session, call 4 (one H200): the landed commit (`land`, 7ee84b9: the dynamic schedule,
# the 8B MLP on the bulk kernel under PDL): the table (four presets, batch 1 / 8 / 32), every GPU
# test but the soak and the cases call 3 ran on the same kernels, then racecheck over the dynamic
# schedule's test with what is left.
. dev/call_lib.sh
unpack_builds
for m in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  bench_rows table_$m $X/land 200 --preset $m --batch 1,8,32 --pdl both --backend both \
    --overlap-streams 1 --overlap-pdl-chain
done
gpu_tests rest $X/land $(left 450) '*:-Overlap.Soak:Chain/*:FullSize/*'
F='MatmulTest.StreamDynamicScheduleMatchesStatic'
log "compute-sanitizer racecheck over $F ($(left 570) s)"
timeout -k 5 $(left 570) compute-sanitizer --tool racecheck --error-exitcode 9 \
  $X/land/megaops_gpu_tests --gtest_filter="$F" >$O/sanitize_racecheck.log 2>&1
echo "racecheck rc=$?" | tee -a $O/run.log
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |^\[       OK" $O/sanitize_racecheck.log | tail -6 | tee -a $O/run.log
call_finish
