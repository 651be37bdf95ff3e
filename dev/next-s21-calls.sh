#!/usr/bin/env bash
# Written in the twentieth session (device time spent), for the next one's first call on one
# H200. Build: scripts/build_variant.sh main; scripts/pack_variants.sh main (check
# .carry/main/GIT_SHA against `git log`). Run as `bash dev/next-s21-calls.sh` with carry
# [".carry/pack.tar.xz"].
#   0. the matmul GPU tests of HEAD (b7767a8's launch changes and the dynamic tests' schedule
#      checks ran on no GPU; the device code is 7ee84b9's);
#   1. racecheck over the dynamic schedule's short test (the folds and the epilogue forced
#      dynamic; the whole dynamic test did not finish under racecheck in 377 s);
#   2. a chain soak of llama3.1-8b at batch 1 (its gate_up runs the dynamic schedule: the
#      counters' zeroing over every step), tokens against the conventional step;
#   3. llama3.1-8b's per-op profile (events between ops, no PDL) with its MLP on cuBLASLt and on
#      the bulk kernel (MEGAOPS_MATMUL_STREAM_SHAPES): where conventional + PDL loses ~4 us a
#      layer on the bulk kernel against bench-matmul's 3.1 (perf-notes item 40);
#   4. the table (four presets, batch 1 / 8 / 32), with what is left.
. dev/call_lib.sh
unpack_builds
gpu_tests matmul $X/main 120 'MatmulTest.*'
racecheck_tests $X/main 'MatmulTest.StreamDynamicScheduleFolds' 150
log "soak: llama3.1-8b chain, batch 1, 120 s"
MEGAOPS_WATCHDOG_MS=2000 MEGAOPS_SOAK_SECONDS=120 MEGAOPS_SOAK_PRESET=llama3.1-8b MEGAOPS_SOAK_BATCH=1 \
  MEGAOPS_SOAK_PDL_CHAIN=1 \
  timeout -k 5 200 $X/main/megaops_gpu_tests --gtest_filter='Overlap.Soak' >$O/soak.log 2>&1
echo "soak rc=$?" | tee -a $O/run.log
grep -E "steps|mismatch|OK \]|FAILED" $O/soak.log | tail -4 | tee -a $O/run.log
for v in cublaslt bulk; do
  shapes=""
  [ $v = bulk ] && shapes="28672x4096,4096x14336"
  log "profile llama3.1-8b, MLP on $v"
  MEGAOPS_MATMUL_STREAM_SHAPES=$shapes timeout 120 $X/main/megaops profile --preset llama3.1-8b \
    --batch 1 --json $O/profile_8b_$v.json >$O/profile_8b_$v.log 2>&1
  echo "profile rc=$?" | tee -a $O/run.log
done
table_rows $X/main 590
call_finish
