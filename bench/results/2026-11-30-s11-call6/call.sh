#!/usr/bin/env bash
# Eleventh session, device call 6 (2026-11-30), one H200, build .carry/x/main (e111589: the tile
# waits' back-off cap at 64 ns; scripts/build_variant.sh main, scripts/pack_variants.sh main).
#   1. The README table: four presets, batch 1 / 8 / 32, conventional PDL off / on, overlap.
#   2. The tile semaphore and overlap tests on this build (the default cap, no variable).
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x/main
export MEGAOPS_GIT_SHA=$(cat $X/GIT_SHA)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for p in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  log "bench $p"
  timeout $(left 250) $X/megaops bench --preset $p --batch 1,8,32 --prompt 32 --gen 128 \
    --repeats 3 --pdl both --backend both --json $O/bench_$p.json > $O/bench_$p.log 2>&1
  echo "rc $?" | tee -a $O/run.log
  grep -E "^(backend|conventional|overlap)" $O/bench_$p.log | tee -a $O/run.log
done
log "tests"
timeout $(left 300) $X/megaops_gpu_tests \
  --gtest_filter='TileSemaphore.*:Overlap.*:OverlapDeathTest.*:Presets/OverlapVsConventional.*:FullSize/OverlapFullSize.*1b*' \
  > $O/tests.log 2>&1; echo "rc $?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $O/tests.log | tee -a $O/run.log
call_finish
