#!/usr/bin/env bash
# Twenty-first session, call 3 (one H200): `align` = main + dev/ring-align.patch (the bulk
# kernel's ring starts 128-byte aligned; s21-call2's ncu: 25% extra L2 sectors from bulk copies
# landing 16 bytes past a line). Its matmul tests; bench-matmul main / align alternated on the
# four presets' shapes; then batch-1 rows (conventional PDL off / on, chain) main / align
# alternated on llama3.1-8b, qwen3-8b and llama3.2-1b.
. dev/call_lib.sh
unpack_builds
gpu_tests align_matmul $X/align 150 'MatmulTest.*'
for round in 1 2; do
  for p in llama3.1-8b llama3.2-1b qwen3-8b qwen3-0.6b; do
    for b in main align; do
      paths=stream-bulk
      [ $b = main ] && [ $round = 1 ] && paths=read,cublaslt-tuned,stream-bulk
      log "bench-matmul $b $p round $round"
      MEGAOPS_GIT_SHA=$(cat $X/$b/GIT_SHA) timeout 60 $X/$b/megaops bench-matmul --preset $p --batch 1 \
        --paths $paths --pdl --json $O/mm_${b}_${p}_r$round.json >$O/mm_${b}_${p}_r$round.log 2>&1
      grep -E "proj|head" $O/mm_${b}_${p}_r$round.log | tee -a $O/run.log
    done
  done
done
CH="--batch 1 --pdl both --backend both --overlap-streams 1 --overlap-pdl-chain"
for m in llama3.1-8b qwen3-8b llama3.2-1b; do
  bench_rows main_$m $X/main 560 --preset $m $CH
  bench_rows align_$m $X/align 580 --preset $m $CH
done
call_finish
