#!/usr/bin/env bash
# Twenty-second session, first device call (one H200). Builds (scripts/pack_variants.sh main
# ksplit three): main = HEAD; ksplit = main + dev/stream-ksplit.patch; three = main +
# dev/qkvo-three-ctas.patch. dev/next-s22-calls.sh split in two so each fits 600 s:
#   0. the k split's GPU tests (every MatmulTest: it touches the bulk kernel's static schedule)
#      and racecheck over its own test;
#   1. bench-matmul of the 8B / 1B shapes, split forced per shape (S = 1, 2, 3), and `three`;
#   2. rows alternated, batch 1: main / ksplit (8B down, QKV, O at S = 2; 1B down at S = 2) /
#      three (8B);
#   3. a trace of main's 1B chain step (item 2 of dev/README's list).
. dev/call_lib.sh
unpack_builds
gpu_tests ksplit_matmul $X/ksplit 150 'MatmulTest.*'
racecheck_tests $X/ksplit 'MatmulTest.StreamKSplitMatchesReference' 90
for p in llama3.1-8b llama3.2-1b; do
  for S in 1 2 3; do
    case $p in
      llama3.1-8b) SH="4096x14336:$S,6144x4096:$S,4096x4096:$S" ;;
      llama3.2-1b) SH="2048x8192:$S,3072x2048:$S,2048x2048:$S" ;;
    esac
    log "bench-matmul ksplit S=$S $p"
    MEGAOPS_STREAM_KSPLIT_SHAPES=$SH MEGAOPS_GIT_SHA=$(cat $X/ksplit/GIT_SHA) timeout 60 \
      $X/ksplit/megaops bench-matmul --preset $p --batch 1 --paths read,stream-bulk --pdl \
      --json $O/mm_S${S}_$p.json >$O/mm_S${S}_$p.log 2>&1
    grep -E "proj|head" $O/mm_S${S}_$p.log | tee -a $O/run.log
  done
done
log "bench-matmul three llama3.1-8b"
MEGAOPS_GIT_SHA=$(cat $X/three/GIT_SHA) timeout 60 $X/three/megaops bench-matmul --preset llama3.1-8b \
  --batch 1 --paths read,stream-bulk --pdl --json $O/mm_three.json >$O/mm_three.log 2>&1
grep -E "proj|head" $O/mm_three.log | tee -a $O/run.log
CH="--batch 1 --pdl both --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  bench_rows main_8b_r$round $X/main 585 --preset llama3.1-8b $CH
  MEGAOPS_STREAM_KSPLIT_SHAPES=4096x14336:2,6144x4096:2,4096x4096:2 \
    bench_rows ks_8b_r$round $X/ksplit 585 --preset llama3.1-8b $CH
  bench_rows three_8b_r$round $X/three 585 --preset llama3.1-8b $CH
  bench_rows main_1b_r$round $X/main 585 --preset llama3.2-1b $CH
  MEGAOPS_STREAM_KSPLIT_SHAPES=2048x8192:2 bench_rows ks_1b_r$round $X/ksplit 585 --preset llama3.2-1b $CH
done
log "trace main llama3.2-1b chain"
timeout $(left 595) $X/main/megaops trace --preset llama3.2-1b --batch 1 --streams 1 --pdl-chain \
  --out $O/trace_main_1b.json > $O/trace_main_1b.log 2>&1
grep "step span" $O/trace_main_1b.log | tee -a $O/run.log
call_finish
