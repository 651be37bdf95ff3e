#!/usr/bin/env bash
# Ninth session, device call 4 (2026-11-30), one H200, ~4 minutes: cf693c7 (b6edc07 with the
# overlap step's per-step split reverted after call 3's bench hung at the batch 1 -> 8 switch).
# The overlap tests, then the bench of the four presets at batch 1, 8 and 32 (the sequence that
# hung), conventional PDL off / on and overlap. Everything in $OUT/all.tgz.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
B=.carry/x/land
log "overlap tests"
OUT=$O/overlap_tests BIN=$B OVERLAP_PRESETS=llama3.2-1b OVERLAP_BATCHES=1 \
  timeout $(left 200) scripts/gpu_run.sh overlap > $O/run_overlap_tests.log 2>&1
grep -E "PASSED|FAILED|atchdog" $O/run_overlap_tests.log | tail -4 | tee -a $O/run.log
for p in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  log "bench $p"
  MEGAOPS_GIT_SHA=$(cat $B/GIT_SHA) timeout $(left 380) $B/megaops bench --preset $p \
    --batch 1,8,32 --prompt 32 --gen 128 --repeats 3 --pdl both --backend both \
    --json $O/bench_$p.json > $O/bench_$p.log 2>&1
  echo "rc $?" >> $O/bench_$p.log
  grep -E "^(backend|conventional|overlap)|error|rc " $O/bench_$p.log | tee -a $O/run.log
done
call_finish
