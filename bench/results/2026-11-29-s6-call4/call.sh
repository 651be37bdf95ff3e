#!/usr/bin/env bash
# Sixth session, device call 4 (one H200): main with the new matmul dispatch (small-m only for
# k <= 2048: the 8B's QKV / O move to cuBLASLt). The GPU tests, then the overlap tests and the
# overlap vs conventional bench at batch 1, 8 and 32 for the four presets (issue 2's and issue 3's
# tables, PDL off and on). Carry .carry/bin. Everything in $OUT.
set -u
export NCCL_NVLS_ENABLE=0
OUT=$OUT/r BIN=.carry/bin OVERLAP_TEST_LIMIT=200 OVERLAP_BATCHES=1,8,32 \
  timeout 580 scripts/gpu_run.sh tests overlap > /tmp/run.log 2>&1
cp /tmp/run.log "$OUT/"
