#!/usr/bin/env bash
# Eighteenth session, first device call (one H200, <= 9.5 minutes). Builds
# (scripts/pack_variants.sh main bx bx3): main = 3bd0878; bx = main + dev/stream-bulk-bf16x.patch;
# bx3 = bx + dev/stream-bulk-bf16x-lb3.patch.
#   1. main: the GPU tests of what 3bd0878 touched without a GPU (qkv_rope, the RoPE fold,
#      attention, the norm fold, the overlap executor).
#   2. bx3: the bulk kernel's tests and the chain's bit-equality tests.
#   3. Rows alternated main / bx / bx3, chain at batch 1 (conventional + PDL beside it); 8B rows.
#   4. bx3: every GPU test but the soak, in what is left.
. dev/call_lib.sh
unpack_builds
gpu_tests main_touched $X/main 120 \
  'RopeFold*:QkvRope*:DecodeAttention.*:MatmulTest.*Fold*:Overlap.*:OverlapDeathTest.*:-Overlap.Soak'
gpu_tests bx3_stream $X/bx3 60 \
  'MatmulTest.Stream*:Overlap.PdlChainMatchesConventional:Overlap.PdlChainFoldsIntoStreamingMatmuls'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  for m in llama3.2-1b qwen3-0.6b; do
    for v in main bx bx3; do
      bench_rows ${v}_${m}_r$round $X/$v 330 --preset $m $CH
    done
  done
done
for v in main bx3; do
  bench_rows ${v}_llama3.1-8b $X/$v 330 --preset llama3.1-8b $CH
done
timeout $(left 400) $X/bx3/megaops trace --preset llama3.2-1b --batch 1 --streams 1 --pdl-chain \
  --out $O/trace_bx3_1b.json > $O/trace_bx3_1b.log 2>&1
grep "step span" $O/trace_bx3_1b.log | tee -a $O/run.log
gpu_tests bx3_all $X/bx3 $(left 585) '*:-Overlap.Soak'
call_finish
