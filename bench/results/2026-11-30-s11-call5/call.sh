#!/usr/bin/env bash
# Eleventh session, device call 5 (2026-11-30), one H200, build .carry/x/main (3a32e94; packed
# with fold by scripts/pack_variants.sh main fold). ~7 minutes. Everything in $OUT/all.tgz.
# Call 4 measured the overlap step faster when its waits spin (MEGAOPS_TILE_WAIT_MAX_NS=0) than at
# the default back-off cap of 256 ns (qwen3-0.6b b1 1.201-1.207 -> 1.163-1.166 ms). DESIGN rule 4
# keeps a __nanosleep back-off, so the question is whether a smaller cap gets the spin's gain.
#   1. The overlap step at caps 256 (default), 64 and 0, llama3.2-1b / qwen3-0.6b / llama3.1-8b,
#      batch 1, 8, 32, rows alternated twice (the knob is read at executor start; same binary).
#   2. The overlap tests with the cap at 64 (everything but the 8B full-size comparisons).
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x/main
export MEGAOPS_GIT_SHA=$(cat $X/GIT_SHA)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for r in 1 2; do
  for p in llama3.2-1b qwen3-0.6b llama3.1-8b; do
    for w in 256 64 0; do
      log "bench overlap $p wait_max_ns=$w r$r"
      MEGAOPS_TILE_WAIT_MAX_NS=$w timeout $(left 470) $X/megaops bench --preset $p --batch 1,8,32 \
        --prompt 32 --gen 128 --repeats 3 --backend overlap \
        --json $O/bench_ovl${w}_${p}_r$r.json > $O/bench_ovl${w}_${p}_r$r.log 2>&1
      grep -E "^overlap |rror" $O/bench_ovl${w}_${p}_r$r.log | tee -a $O/run.log
    done
  done
done
log "overlap tests, cap 64"
MEGAOPS_TILE_WAIT_MAX_NS=64 timeout $(left 580) $X/megaops_gpu_tests \
  --gtest_filter='Overlap.*:OverlapDeathTest.*:Presets/OverlapVsConventional.*:FullSize/OverlapFullSize.*1b*:FullSize/OverlapFullSize.*0_6b*' \
  > $O/tests_cap64.log 2>&1; echo "rc $?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $O/tests_cap64.log | tee -a $O/run.log
call_finish
