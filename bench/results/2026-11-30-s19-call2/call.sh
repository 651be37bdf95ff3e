#!/usr/bin/env bash
# Written in the eighteenth session (no device time left), for the next one's first two calls on
# one H200. Builds: scripts/build_variant.sh main; scripts/build_variant.sh lk
# dev/bulk-long-k-two-ctas.patch; scripts/build_variant.sh ep dev/bulk-long-k-two-ctas.patch
# dev/silu-epilogue.patch; scripts/pack_variants.sh main lk ep. Run as
# `bash dev/next-s19-calls.sh 1` (tests, ~9 min) and `bash dev/next-s19-calls.sh 2` (rows).
#   1. lk: every GPU test but the soak (the eight Chain/OverlapPdlChain cases run for the first
#      time); ep: the epilogue's kernel tests and the chain's; racecheck over
#      Chain/OverlapPdlChain.MatchesConventional/tiny_llama3_b1 with the rest.
#   2. The table of lk; rows alternated main / lk on the 8B presets (chain, batch 1); the 8B's
#      MLP on the bulk kernel in the chain (MEGAOPS_MATMUL_STREAM_SHAPES: gate_up and down stream,
#      so the chain folds the second norm and SiLU into them), main and lk; bench-matmul of the
#      8B's shapes on cuBLASLt and the bulk kernel (x as bf16 since 7c092d2); the small presets'
#      chain with SiLU·mul in gate_up's epilogue (ep, --overlap-fold-silu epilogue) against lk.
. dev/call_lib.sh
unpack_builds
case "${1:-1}" in
1)
  gpu_tests lk_all $X/lk 330 '*:-Overlap.Soak'
  gpu_tests ep_tests $X/ep 90 \
    'MatmulTest.*Epilogue*:MatmulTest.Stream*Fold*:Chain/OverlapPdlChain.*:Overlap.PdlChainFolds*'
  F='Chain/OverlapPdlChain.MatchesConventional/tiny_llama3_b1'
  log "compute-sanitizer racecheck over $F ($(left 570) s)"
  MEGAOPS_TEST_STEPS=4 timeout -k 5 $(left 570) compute-sanitizer --tool racecheck --error-exitcode 9 \
    $X/lk/megaops_gpu_tests --gtest_filter="$F" > $O/sanitize_racecheck.log 2>&1
  echo "racecheck rc=$?" | tee -a $O/run.log
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |^\[       OK" $O/sanitize_racecheck.log | tail -6 | tee -a $O/run.log
  ;;
2)
  for m in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
    bench_rows table_$m $X/lk 200 --preset $m --batch 1,8,32 --pdl both --backend both \
      --overlap-streams 1 --overlap-pdl-chain
  done
  CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
  for m in llama3.1-8b qwen3-8b; do
    bench_rows main_$m $X/main 330 --preset $m $CH
    bench_rows lk_$m $X/lk 330 --preset $m $CH
  done
  for round in 1 2; do
    for m in llama3.2-1b qwen3-0.6b; do
      bench_rows lk_${m}_r$round $X/lk 330 --preset $m $CH
      bench_rows ep_${m}_r$round $X/ep 330 --preset $m $CH --overlap-fold-silu epilogue
    done
  done
  MLP8="28672x4096,4096x14336"   # llama3.1-8b gate_up, down
  MLPQ="24576x4096,4096x12288"   # qwen3-8b
  for v in main lk; do
    MEGAOPS_MATMUL_STREAM_SHAPES=$MLP8 bench_rows mlp_${v}_llama3.1-8b $X/$v 450 --preset llama3.1-8b $CH
    MEGAOPS_MATMUL_STREAM_SHAPES=$MLPQ bench_rows mlp_${v}_qwen3-8b $X/$v 450 --preset qwen3-8b $CH
  done
  # The 8B's MLP on the bulk kernel with SiLU·mul in gate_up's epilogue (no 114 KB read a down CTA).
  MEGAOPS_MATMUL_STREAM_SHAPES=$MLP8 bench_rows mlpep_llama3.1-8b $X/ep 480 --preset llama3.1-8b \
    $CH --overlap-fold-silu epilogue
  MEGAOPS_MATMUL_STREAM_SHAPES=$MLPQ bench_rows mlpep_qwen3-8b $X/ep 480 --preset qwen3-8b \
    $CH --overlap-fold-silu epilogue
  for v in main lk; do
    log "bench-matmul $v llama3.1-8b"
    timeout $(left 570) $X/$v/megaops bench-matmul --preset llama3.1-8b --batch 1 \
      --paths read,cublaslt,stream-bulk --pdl --json $O/matmul_$v.json > $O/matmul_$v.log 2>&1
    tail -n 12 $O/matmul_$v.log | tee -a $O/run.log
  done
  ;;
esac
call_finish
