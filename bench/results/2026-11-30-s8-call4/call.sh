#!/usr/bin/env bash
# Eighth session, device call 6 (2026-11-30), one H200. Carry .carry/pack.tar.xz with `land`
# (ef393ec: the streaming QKV / O under PDL for the 8B-class layers, their predecessors launched
# on its shared split). Every GPU test (the overlap executor's included), then the batch-1 bench
# of the four presets, conventional PDL off / on and overlap. Everything in $OUT/all.tgz.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
log "GPU tests"
OUT=$O/tests BIN=.carry/x/land TEST_FILTER='*' MEGAOPS_WATCHDOG_MS=2000 timeout $(left 330) \
  scripts/gpu_run.sh tests > $O/run_tests.log 2>&1
tail -6 $O/run_tests.log
for p in llama3.1-8b qwen3-8b llama3.2-1b qwen3-0.6b; do
  log "bench $p"
  MEGAOPS_GIT_SHA=ef393ec timeout $(left 500) .carry/x/land/megaops bench --preset $p --batch 1 \
    --prompt 32 --gen 128 --repeats 3 --pdl both --backend both --json $O/bench_$p.json 2>&1 |
    grep -E "^(backend|conventional|overlap)" | tee -a $O/run.log
done
call_finish
