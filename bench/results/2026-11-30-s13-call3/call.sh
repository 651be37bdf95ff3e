#!/usr/bin/env bash
# Thirteenth session, device call 3 (perf-notes item 29), one H200, ~3 minutes, build `main` of
# .carry/pack.tar.xz (dev/next-call1.sh's pack). llama3.1-8b batch 1 without PDL, eight timed
# repeats each, fresh processes: does the decode step's speed depend on the executor's max_batch
# (the buffers it allocates: KV cache, activations, logits), given that the fast rows so far all
# came from processes with max_batch 32 (the README table's `--batch 1,8,32`, the graph prefill)?
#   mb1: --batch 1 (max_batch 1)   mb8: --batch 1,8   mb32: --batch 1,32   (batch 1 runs first)
#   then mb1 and mb32 again, so each is measured twice in alternation.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
export BENCH_REPEATS=8
for r in 1 2; do
  bench_rows mb1_r$r $X/main 560 --preset llama3.1-8b --batch 1 --pdl off
  bench_rows mb32_r$r $X/main 560 --preset llama3.1-8b --batch 1,32 --pdl off
  [ $r = 1 ] && bench_rows mb8_r$r $X/main 560 --preset llama3.1-8b --batch 1,8 --pdl off
done
call_finish
