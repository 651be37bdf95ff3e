#!/usr/bin/env bash
# Twenty-first session, call 4 (one H200): main = c80adc4 (the aligned ring). Rows alternated,
# batch 1, conventional PDL off / on and the chain, default dispatch against
# MEGAOPS_MATMUL_STREAM_SHAPES putting the LM head (and the MLP without PDL) on the bulk kernel:
# since the aligned ring it is faster than tuned cuBLASLt on every m = 1 shape (s21-call3).
# Then bench-matmul of the 1B / 0.6B shapes at 2-8 ring slots (the 1B's down: 256 row blocks,
# 75% of the ceiling).
. dev/call_lib.sh
unpack_builds
CH="--batch 1 --pdl both --backend both --overlap-streams 1 --overlap-pdl-chain"
declare -A SH=([llama3.1-8b]=128256x4096,28672x4096,4096x14336 [qwen3-8b]=151936x4096,24576x4096,4096x12288
  [llama3.2-1b]=128256x2048,16384x2048 [qwen3-0.6b]=151936x1024)
for round in 1 2; do
  for m in llama3.1-8b qwen3-8b llama3.2-1b qwen3-0.6b; do
    bench_rows def_${m}_r$round $X/main 560 --preset $m $CH
    MEGAOPS_MATMUL_STREAM_SHAPES=${SH[$m]} bench_rows lmb_${m}_r$round $X/main 570 --preset $m $CH
  done
done
for p in llama3.2-1b qwen3-0.6b; do
  log "bench-matmul stages $p"
  MEGAOPS_GIT_SHA=$(cat $X/main/GIT_SHA) timeout 30 $X/main/megaops bench-matmul --preset $p --batch 1 \
    --paths stream-bulk --stages 3,4,6,8 --pdl --json $O/mm_stages_$p.json >$O/mm_stages_$p.log 2>&1
  grep -E "proj|head" $O/mm_stages_$p.log | tee -a $O/run.log
done
call_finish
