#!/usr/bin/env bash
# Written in the seventeenth session, not run (its device time was spent); one H200, ~2.5
# minutes. Builds: scripts/build_variant.sh main; scripts/build_variant.sh bx
# dev/stream-bulk-bf16x.patch; scripts/build_variant.sh bx3 dev/stream-bulk-bf16x.patch
# dev/stream-bulk-bf16x-lb3.patch; scripts/pack_variants.sh main bx bx3. main = 26d72c3 or later; bx = main with x in the bulk kernel's shared memory as bf16 (was
# fp32: the 1B's down projection 81 KB a CTA instead of 97); bx3 = bx with
# __launch_bounds__(288, 3) at m = 1 (72 registers, was 88; the SiLU fold's loads in rounds of 4
# instead of 8) so three CTAs can share an SM. Question (perf-notes item 37): does letting the 1B's
# down projection become resident earlier shorten the chain's step?
#   1. bx3: the bulk kernel's tests and the chain's bit-equality tests.
#   2. Rows alternated main / bx / bx3, chain at batch 1 (conventional + PDL beside it).
. dev/call_lib.sh
unpack_builds
gpu_tests bx3_tests $X/bx3 40 \
  'MatmulTest.Stream*:Overlap.PdlChainMatchesConventional:Overlap.PdlChainFoldsIntoStreamingMatmuls'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  for m in llama3.2-1b qwen3-0.6b; do
    for v in main bx bx3; do
      bench_rows ${v}_${m}_r$round $X/$v 140 --preset $m $CH
    done
  done
done
for v in main bx3; do
  bench_rows ${v}_llama3.1-8b $X/$v 145 --preset llama3.1-8b $CH
done
call_finish
