#!/usr/bin/env bash
# Fourteenth session, device call 5, one H200, ~7 minutes. Builds: `steps` = 86d93a8 +
# dev/bench-step-times.patch; `attnh` = call 4's (a CTA per query head, 128-key rounds);
# `attnh16` = steps + dev/attn-rounds.patch as committed (a CTA per query head with one round of
# up to 256 keys; the landing candidate).
#   1. Conventional PDL off / on, the three builds' rows alternated, every step's time.
#   2. Every GPU test and the HF comparison on `attnh16`.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for v in steps attnh attnh16; do
  bench_rows ${v}_8b $X/$v 330 --preset llama3.1-8b --batch 1 --pdl both --step-times
  bench_rows ${v}_1b $X/$v 330 --preset llama3.2-1b --batch 1,8,32 --pdl both --step-times
  bench_rows ${v}_06b $X/$v 330 --preset qwen3-0.6b --batch 1 --pdl both --step-times
done
for v in attnh16 steps; do
  bench_rows q8b_${v} $X/$v 330 --preset qwen3-8b --batch 1 --pdl both
  bench_rows r2_${v}_8b $X/$v 330 --preset llama3.1-8b --batch 1 --pdl both
done
log "all GPU tests + HF on attnh16"
TEST_FILTER='*' MEGAOPS_WATCHDOG_MS=2000 OUT=$O/tests BIN=$X/attnh16 timeout -k 5 $(left 590) \
  scripts/gpu_run.sh tests hf > $O/tests.log 2>&1
grep -E "PASSED|FAILED|worst|rror|status" $O/tests.log | tail -12 | tee -a $O/run.log
call_finish
