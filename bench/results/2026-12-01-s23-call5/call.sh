#!/usr/bin/env bash
# Twenty-third session, call 5 (~560 s): HEAD's code (17530fb, the x prologue) on the GPU: every
# GPU test but the soak, the table (four presets, batch 1 / 8 / 32, conventional PDL off / on,
# the PDL chain), then an 8B chain soak against conventional + PDL with what is left.
. dev/call_lib.sh
unpack_builds
gpu_tests all_tests $X/main 340 '*:-Overlap.Soak'
table_rows $X/main 500
s=$(( $(left 550) - 25 ))
if [ $s -ge 20 ]; then
  log "soak $s s llama3.1-8b batch 1 chain"
  MEGAOPS_WATCHDOG_MS=2000 MEGAOPS_SOAK_SECONDS=$s MEGAOPS_SOAK_PRESET=llama3.1-8b MEGAOPS_SOAK_BATCH=1 \
    MEGAOPS_SOAK_PDL_CHAIN=1 timeout -k 5 $((s + 20)) $X/main/megaops_gpu_tests \
    --gtest_filter=Overlap.Soak >$O/soak.log 2>&1
  echo "soak rc=$?" | tee -a $O/run.log
  grep -E "^soak:|PASSED|FAILED|atchdog|tokens .* vs" $O/soak.log | tail -6 | tee -a $O/run.log
fi
call_finish
