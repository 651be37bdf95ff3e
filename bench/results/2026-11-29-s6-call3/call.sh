#!/usr/bin/env bash
# Sixth session, device call 3 (one H200): the streaming matmul, second version (fewer
# instructions per byte: call 2's ncu showed it issue-bound, ~92 instructions per 16-byte chunk),
# against small-m and cuBLASLt standalone (ring sizes 2-8, PDL off and on), then the whole
# conventional step with QKV / O moved to cuBLASLt (MEGAOPS_MATMUL_PATH=cublaslt) or to the
# streaming kernel (stream-for-small) against the default, same run. Carry .carry/bin.
. dev/call_lib.sh
BIN=${BIN:-.carry/bin}
export MEGAOPS_GIT_SHA=$(cat $BIN/GIT_SHA)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $O/gpu.txt
log "matmul tests"
timeout $(left 90) $BIN/megaops_gpu_tests --gtest_filter='MatmulTest.*' > $O/matmul_tests.log 2>&1
tail -3 $O/matmul_tests.log | tee -a $O/run.log
for p in llama3.1-8b llama3.2-1b; do
  log "bench-matmul $p"
  timeout $(left 150) $BIN/megaops bench-matmul --preset $p --batch 1 --stages 2,3,4,6,8 \
    --json $O/bench_matmul_$p.json >> $O/run.log 2>&1
done
log "bench-matmul llama3.1-8b --pdl, m = 1 and 4"
timeout $(left 190) $BIN/megaops bench-matmul --preset llama3.1-8b --batch 1,4 --stages 3,4 --pdl \
  --json $O/bench_matmul_llama3.1-8b_pdl.json >> $O/run.log 2>&1
for p in llama3.1-8b llama3.2-1b qwen3-8b qwen3-0.6b; do
  for path in auto cublaslt stream-for-small; do
    log "bench conventional $p $path"
    MEGAOPS_MATMUL_PATH=$path timeout $(left 450) $BIN/megaops bench --preset $p --batch 1 \
      --prompt 32 --gen 128 --repeats 3 --pdl both --json $O/bench_${path}_$p.json >> $O/run.log 2>&1
  done
done
log "overlap full-size tests, stream-for-small"
MEGAOPS_MATMUL_PATH=stream-for-small MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 $(left 580) \
  $BIN/megaops_gpu_tests --gtest_filter='FullSize/Overlap*b1:Overlap.RandomDelays' \
  > $O/overlap_tests_sfs.log 2>&1
grep -E "^\[  (PASSED|FAILED) |FAILED" $O/overlap_tests_sfs.log | tail -12 | tee -a $O/run.log
log "done"
cp $O/run.log "$OUT/"
call_finish
