#!/usr/bin/env bash
# Eighteenth session, third device call (one H200, <= 9.5 minutes). Builds
# (scripts/pack_variants.sh land cap): land = 7c092d2; cap = land + dev/diag-bulk-per-sm.patch
# (MEGAOPS_BULK_PER_SM caps CTAs an SM for every bulk launch, MEGAOPS_BULK_PER_SM_SHAPES
# "NxK:P,..." for launches of one shape).
#   1. Which launches want two CTAs an SM (call 2: all at 2 made the 8B ~1-1.5% faster and the
#      1B 7% slower): rows alternated, one shape capped at a time.
#   2. compute-sanitizer racecheck over the bulk kernel's fold tests (x's new bf16 layout).
#   3. The chain soaked against conventional + PDL at batch 1 on land (llama3.2-1b), with the rest.
. dev/call_lib.sh
unpack_builds
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  m=llama3.1-8b
  bench_rows land_${m}_r$round $X/cap 260 --preset $m $CH
  MEGAOPS_BULK_PER_SM_SHAPES=4096x4096:2 bench_rows capO_${m}_r$round $X/cap 260 --preset $m $CH
  MEGAOPS_BULK_PER_SM_SHAPES=6144x4096:2 bench_rows capQKV_${m}_r$round $X/cap 260 --preset $m $CH
  MEGAOPS_BULK_PER_SM=2 bench_rows cap2_${m}_r$round $X/cap 260 --preset $m $CH
  m=llama3.2-1b
  bench_rows land_${m}_r$round $X/cap 260 --preset $m $CH
  MEGAOPS_BULK_PER_SM_SHAPES=16384x2048:2 bench_rows capGU_${m}_r$round $X/cap 260 --preset $m $CH
  MEGAOPS_BULK_PER_SM_SHAPES=3072x2048:2 bench_rows capQKV_${m}_r$round $X/cap 260 --preset $m $CH
done
m=qwen3-8b
bench_rows land_$m $X/cap 260 --preset $m $CH
MEGAOPS_BULK_PER_SM_SHAPES=4096x4096:2 bench_rows capO_$m $X/cap 260 --preset $m $CH
MEGAOPS_BULK_PER_SM=2 bench_rows cap2_$m $X/cap 260 --preset $m $CH
F='MatmulTest.StreamSiluFold*:MatmulTest.StreamNormFold*'
log "compute-sanitizer racecheck over $F ($(left 440) s)"
MEGAOPS_TEST_STEPS=8 timeout -k 5 $(left 440) compute-sanitizer --tool racecheck --error-exitcode 9 \
  $X/land/megaops_gpu_tests --gtest_filter="$F" > $O/sanitize_racecheck.log 2>&1
echo "racecheck rc=$?" | tee -a $O/run.log
grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) |^\[       OK|tests ran|RACE|Race" $O/sanitize_racecheck.log | tail -12 | tee -a $O/run.log
s=$(( $(left 575) - 40 ))
log "soak llama3.2-1b batch 1, chain, $s s"
MEGAOPS_SOAK_SECONDS=$s MEGAOPS_SOAK_PRESET=llama3.2-1b MEGAOPS_SOAK_BATCH=1 MEGAOPS_SOAK_PDL_CHAIN=1 \
  timeout -k 5 $((s + 35)) $X/land/megaops_gpu_tests --gtest_filter=Overlap.Soak \
  --gtest_output=json:$O/soak.json > $O/soak.log 2>&1
echo "soak rc=$?" | tee -a $O/run.log
grep -E "^soak:|PASSED|FAILED|watchdog|tokens .* vs" $O/soak.log | tail -5 | tee -a $O/run.log
call_finish
