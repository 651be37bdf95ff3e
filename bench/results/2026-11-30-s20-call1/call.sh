#!/usr/bin/env bash
# Twentieth session, call 1 (one H200): the streaming kernel's row-block schedule (diagnostic
# build `ord` = main + dev/bulk-order-tmp.patch: MEGAOPS_BULK_ORDER / _L2HINT / _DYN / _PER_SM)
# on the 8B and 1B matmul shapes, its kernel tests under the dynamic schedule, the 8B steps with
# the MLP on it, then main's chain and full-size tests.
. dev/call_lib.sh
unpack_builds
mm() {  # name build env... : bench-matmul of one preset's shapes, m = 1, PDL
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
  mm ${p}_ord1 $X/ord $p stream-bulk MEGAOPS_BULK_ORDER=1
  mm ${p}_ord4 $X/ord $p stream-bulk MEGAOPS_BULK_ORDER=4
  mm ${p}_l2 $X/ord $p stream-bulk MEGAOPS_BULK_L2HINT=1
  mm ${p}_dyn $X/ord $p stream-bulk MEGAOPS_BULK_DYN=1
  mm ${p}_dyn2 $X/ord $p stream-bulk MEGAOPS_BULK_DYN=1 MEGAOPS_BULK_PER_SM=2
  mm ${p}_dynl2 $X/ord $p stream-bulk MEGAOPS_BULK_DYN=1 MEGAOPS_BULK_L2HINT=1
  mm ${p}_main2 $X/main $p read,cublaslt,stream-bulk X=0
done
MEGAOPS_BULK_DYN=1 gpu_tests ord_dyn_tests $X/ord 60 'MatmulTest.*:Chain/OverlapPdlChain.*'
MEGAOPS_BULK_ORDER=4 gpu_tests ord_o4_tests $X/ord 40 'MatmulTest.*'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
MLP8="28672x4096,4096x14336"
MLPQ="24576x4096,4096x12288"
bench_rows main_8b $X/main 240 --preset llama3.1-8b $CH
MEGAOPS_BULK_DYN=1 MEGAOPS_MATMUL_STREAM_SHAPES=$MLP8 bench_rows dynmlp_8b $X/ord 260 --preset llama3.1-8b $CH
MEGAOPS_BULK_DYN=1 MEGAOPS_MATMUL_STREAM_SHAPES=$MLPQ bench_rows dynmlp_q8b $X/ord 280 --preset qwen3-8b $CH
MEGAOPS_BULK_DYN=1 bench_rows dyn_1b $X/ord 290 --preset llama3.2-1b $CH
bench_rows main_1b $X/main 300 --preset llama3.2-1b $CH
gpu_tests first $X/main $(left 585) 'Chain/*:FullSize/*'
call_finish
