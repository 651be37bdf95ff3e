#!/usr/bin/env bash
# Twenty-first session, call 1 (one H200): the matmul GPU tests of HEAD (b7767a8's host-side
# launch changes ran on no GPU); then the locality question of the bulk kernel (perf-notes item
# 41): `contig` = main + dev/diag-contig.patch, MEGAOPS_DIAG_PIECES=P reads a row block as P
# contiguous segments (P = 8: main's pattern, 8 rows of 2 KB a stage; P = 1: one contiguous
# 16 KB copy a stage); bench-matmul of the 8B and 1B shapes at 2-4 ring slots against main,
# tuned cuBLASLt and the plain read; the 8B's per-op profile with its MLP on each kernel.
. dev/call_lib.sh
unpack_builds
gpu_tests matmul $X/main 150 'MatmulTest.*'
for p in llama3.1-8b llama3.2-1b; do
  log "bench-matmul main $p"
  MEGAOPS_GIT_SHA=$(cat $X/main/GIT_SHA) timeout 60 $X/main/megaops bench-matmul --preset $p --batch 1 \
    --paths read,cublaslt-tuned,stream-bulk --pdl --json $O/mm_main_$p.json >$O/mm_main_$p.log 2>&1
  grep -E "proj|head" $O/mm_main_$p.log | tee -a $O/run.log
  for P in 8 4 2 1; do
    log "bench-matmul contig P=$P $p"
    MEGAOPS_DIAG_PIECES=$P MEGAOPS_GIT_SHA=$(cat $X/contig/GIT_SHA) timeout 60 $X/contig/megaops bench-matmul \
      --preset $p --batch 1 --paths stream-bulk --stages 2,3,4 --pdl --json $O/mm_P${P}_$p.json \
      >$O/mm_P${P}_$p.log 2>&1
    grep -E "proj|head" $O/mm_P${P}_$p.log | tee -a $O/run.log
  done
done
for v in cublaslt bulk; do
  shapes=""
  [ $v = bulk ] && shapes="28672x4096,4096x14336"
  log "profile llama3.1-8b, MLP on $v"
  MEGAOPS_MATMUL_STREAM_SHAPES=$shapes timeout 120 $X/main/megaops profile --preset llama3.1-8b \
    --batch 1 --json $O/profile_8b_$v.json >$O/profile_8b_$v.log 2>&1
  echo "profile rc=$?" | tee -a $O/run.log
done
call_finish
