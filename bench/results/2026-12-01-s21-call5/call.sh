#!/usr/bin/env bash
# Twenty-first session, call 5 (one H200): the landed code (main: the aligned ring, c80adc4, and
# the LM heads / MLP on the bulk kernel with either PDL setting): the table (four presets, batch
# 1 / 8 / 32), every GPU test but the soak, then a 120 s chain soak of llama3.1-8b at batch 1
# (its gate_up and LM head on the dynamic schedule: the counters' zeroing over every step).
. dev/call_lib.sh
unpack_builds
table_rows $X/main 200
gpu_tests all $X/main $(left 470) '*:-Overlap.Soak'
log "soak: llama3.1-8b chain, batch 1, $(left 585) s left"
MEGAOPS_WATCHDOG_MS=2000 MEGAOPS_SOAK_SECONDS=$(( $(left 585) - 25 )) MEGAOPS_SOAK_PRESET=llama3.1-8b \
  MEGAOPS_SOAK_BATCH=1 MEGAOPS_SOAK_PDL_CHAIN=1 \
  timeout -k 5 $(left 590) $X/main/megaops_gpu_tests --gtest_filter='Overlap.Soak' >$O/soak.log 2>&1
echo "soak rc=$?" | tee -a $O/run.log
grep -E "steps|mismatch|OK \]|FAILED" $O/soak.log | tail -4 | tee -a $O/run.log
call_finish
