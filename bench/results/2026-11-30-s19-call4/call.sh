#!/usr/bin/env bash
# Nineteenth session, fourth device call (one H200, the session's last ~600 s). Builds
# (scripts/pack_variants.sh main land): main = f6161d6; land = the working tree to land: the
# long-row cap of two CTAs an SM for n <= 8192, the SwiGLU epilogue as a template argument of the
# bulk kernel (the kernel without it is the conventional step's code of before) and on by default
# in the chain. Not the chain's own MLP dispatch (-call3: its 8B logits differ from the
# conventional step's by 1.4e-2, dev/chain-mlp-bulk.patch).
#   1. The table of land, then rows main / land on the small presets (conventional + PDL: did the
#      template remove -call3's 1-2% on the conventional step?).
#   2. Every GPU test of land but the soak.
#   3. compute-sanitizer racecheck over the epilogue's kernel test, with what is left.
. dev/call_lib.sh
unpack_builds
for m in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  bench_rows table_$m $X/land 150 --preset $m --batch 1,8,32 --pdl both --backend both \
    --overlap-streams 1 --overlap-pdl-chain
done
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for m in llama3.2-1b qwen3-0.6b; do
  bench_rows main_$m $X/main 170 --preset $m $CH
  bench_rows land_$m $X/land 170 --preset $m $CH
done
gpu_tests land_all $X/land $(left 470) '*:-Overlap.Soak'
F='MatmulTest.StreamSiluEpilogueMatchesMatmulThenSiluMul'
log "compute-sanitizer racecheck over $F ($(left 515) s)"
MEGAOPS_TEST_STEPS=4 timeout -k 5 $(left 515) compute-sanitizer --tool racecheck --error-exitcode 9 \
  $X/land/megaops_gpu_tests --gtest_filter="$F" > $O/sanitize_racecheck.log 2>&1
echo "racecheck rc=$?" | tee -a $O/run.log
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |^\[       OK" $O/sanitize_racecheck.log | tail -6 | tee -a $O/run.log
call_finish
