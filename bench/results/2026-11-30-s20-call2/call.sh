#!/usr/bin/env bash
# Twentieth session, call 2 (one H200): the dynamic row-block schedule without its start stall
# (ord = main + dev/bulk-order-tmp.patch; MEGAOPS_BULK_DYN=N: tickets for launches of n >= N), the
# two fold tests' seeds that failed in call 1 replayed on main, the 8B steps with the MLP on the
# bulk kernel under it, then the rest of main's GPU tests.
. dev/call_lib.sh
unpack_builds
mm() {  # name build preset paths env...
  local name=$1 bin=$2 preset=$3 paths=$4
  shift 4
  log "bench-matmul $name"
  env "$@" timeout 60 $bin/megaops bench-matmul --preset $preset --batch 1 --paths $paths --pdl \
    --json $O/mm_$name.json >$O/mm_$name.log 2>&1
  echo "rc=$?" >>$O/mm_$name.log
  grep -E "proj|head|rc=" $O/mm_$name.log | tee -a $O/run.log
}
for p in llama3.1-8b llama3.2-1b; do
  mm ${p}_main $X/main $p read,cublaslt,stream-bulk X=0
  mm ${p}_ord0 $X/ord $p stream-bulk X=0
  mm ${p}_dyn $X/ord $p stream-bulk MEGAOPS_BULK_DYN=1
  mm ${p}_dyn1 $X/ord $p stream-bulk MEGAOPS_BULK_DYN=1 MEGAOPS_BULK_ORDER=1
  mm ${p}_main2 $X/main $p cublaslt,stream-bulk X=0
  mm ${p}_dynb $X/ord $p stream-bulk MEGAOPS_BULK_DYN=1
done
MEGAOPS_TEST_SEED=2952590527 gpu_tests seed_epi $X/main 40 'MatmulTest.StreamSiluEpilogue*'
MEGAOPS_TEST_SEED=3109474523 gpu_tests seed_norm $X/main 40 'MatmulTest.StreamNormFold*'
MEGAOPS_BULK_DYN=1 gpu_tests dyn_tests $X/ord 60 'MatmulTest.Stream*:Chain/OverlapPdlChain.*'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
MLP8="28672x4096,4096x14336"
MLPQ="24576x4096,4096x12288"
bench_rows main_8b $X/main 200 --preset llama3.1-8b $CH
MEGAOPS_BULK_DYN=16384 MEGAOPS_MATMUL_STREAM_SHAPES=$MLP8 bench_rows dyn16k_mlp_8b $X/ord 215 --preset llama3.1-8b $CH
MEGAOPS_BULK_DYN=1 MEGAOPS_MATMUL_STREAM_SHAPES=$MLP8 bench_rows dyn_mlp_8b $X/ord 230 --preset llama3.1-8b $CH
MEGAOPS_MATMUL_STREAM_SHAPES=$MLP8 bench_rows mlp_8b $X/ord 245 --preset llama3.1-8b $CH
MEGAOPS_BULK_DYN=16384 MEGAOPS_MATMUL_STREAM_SHAPES=$MLPQ bench_rows dyn16k_mlp_q8b $X/ord 260 --preset qwen3-8b $CH
MEGAOPS_BULK_DYN=1 bench_rows dyn_1b $X/ord 265 --preset llama3.2-1b $CH
bench_rows main_1b $X/main 270 --preset llama3.2-1b $CH
gpu_tests rest $X/main $(left 585) '*:-Overlap.Soak:Chain/*:FullSize/*'
call_finish
