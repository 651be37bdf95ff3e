#!/usr/bin/env bash
# Fourteenth session, device call 6, one H200, ~5 minutes: the landing commit's build `land`
# (85332b8: decode attention with a CTA per query head at small batches and contexts up to 256
# keys unsplit, the same kernels as call 4's `attnh`; bench --step-times). Every GPU test and the
# HF comparison, then a bench row if time is left.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "all GPU tests + HF on land"
TEST_FILTER='*' MEGAOPS_WATCHDOG_MS=2000 OUT=$O/tests BIN=$X/land timeout -k 5 $(left 270) \
  scripts/gpu_run.sh tests hf > $O/tests.log 2>&1
grep -E "PASSED|FAILED|worst|rror|status" $O/tests.log | tail -12 | tee -a $O/run.log
call_finish
[ $(left 280) -gt 20 ] && bench_rows land_1b $X/land 280 --preset llama3.2-1b --batch 1 --pdl both
call_finish
