#!/usr/bin/env bash
# Twentieth session, call 3 (one H200): build `dyn` = main + the dynamic row-block schedule, the
# 8B MLP on the bulk kernel under PDL and the fold tests' oracle on the GPU's normed x
# (dev/dyn-tmp.patch, the working tree of that commit): its matmul, chain and full-size tests,
# then main / dyn rows alternated on the 8B presets and bench-matmul of its 8B / 1B shapes.
. dev/call_lib.sh
unpack_builds
gpu_tests dyn_tests $X/dyn 330 'MatmulTest.*:MatmulDispatch*:Chain/*:FullSize/*'
CH="--batch 1 --pdl both --backend both --overlap-streams 1 --overlap-pdl-chain"
for m in llama3.1-8b qwen3-8b; do
  bench_rows main_$m $X/main 500 --preset $m $CH
  bench_rows dyn_$m $X/dyn 520 --preset $m $CH
done
for p in llama3.1-8b llama3.2-1b; do
  log "bench-matmul dyn $p"
  timeout 30 $X/dyn/megaops bench-matmul --preset $p --batch 1 --paths read,cublaslt-tuned,stream-bulk \
    --pdl --json $O/mm_dyn_$p.json >$O/mm_dyn_$p.log 2>&1
  grep -E "proj|head" $O/mm_dyn_$p.log | tee -a $O/run.log
done
call_finish
