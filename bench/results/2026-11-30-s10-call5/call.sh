#!/usr/bin/env bash
# Tenth session, device call 5 (2026-11-30), one H200, build 651395e (build/ copied to .carry/cur):
# the per-shape read floor (bench-matmul --paths read: the ceiling's read kernel over the same
# weight bytes in the same graph of 40 launches) beside cuBLASLt and the bulk streaming kernel, m = 1.
. dev/call_lib.sh
B=.carry/cur
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for r in 1 2; do
  for p in llama3.1-8b llama3.2-1b qwen3-0.6b; do
    log "bench-matmul $p r$r"
    MEGAOPS_GIT_SHA=$(cat $B/GIT_SHA) timeout 120 $B/megaops bench-matmul --preset $p --batch 1 \
      --paths read,cublaslt,stream-bulk --json $O/bm_${p}_r$r.json > $O/bm_${p}_r$r.log 2>&1
    echo "rc $?" | tee -a $O/run.log
    grep -E "^(op|qkv|o_proj|gate|down|lm)|rror" $O/bm_${p}_r$r.log | tee -a $O/run.log
  done
done
call_finish
