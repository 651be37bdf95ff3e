#!/usr/bin/env bash
# Sixth session, device call 2 (one H200): the weight-streaming matmul kernel (kernels/matmul_stream.cu)
# before it reaches the default dispatch. Carry .carry/bin (scripts/pack_gpu.sh). In order:
# its GPU tests; `bench-matmul` on the model shapes (small-m vs stream vs cuBLASLt, m = 1 and 4,
# ring sizes 4 / 8 / 12); the conventional step with MEGAOPS_MATMUL_PATH=stream against the
# default in the same run; the overlap tests and bench on the streaming path (its hooks); ncu of
# one streaming launch. Everything in $OUT/all.tgz.
. dev/call_lib.sh
BIN=${BIN:-.carry/bin}
export MEGAOPS_GIT_SHA=$(cat $BIN/GIT_SHA)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $O/gpu.txt
log "matmul tests"
timeout $(left 90) $BIN/megaops_gpu_tests --gtest_filter='MatmulTest.*' > $O/matmul_tests.log 2>&1
tail -3 $O/matmul_tests.log | tee -a $O/run.log
for p in llama3.1-8b llama3.2-1b qwen3-0.6b; do
  log "bench-matmul $p"
  timeout $(left 200) $BIN/megaops bench-matmul --preset $p --batch 1,4 --stages 0,4,12 \
    --json $O/bench_matmul_$p.json >> $O/run.log 2>&1
done
for p in llama3.1-8b llama3.2-1b qwen3-8b qwen3-0.6b; do
  for path in auto stream; do
    log "bench conventional $p $path"
    MEGAOPS_MATMUL_PATH=$path timeout $(left 330) $BIN/megaops bench --preset $p --batch 1 \
      --prompt 32 --gen 128 --repeats 3 --pdl both --json $O/bench_${path}_$p.json >> $O/run.log 2>&1
  done
done
log "overlap tests, streaming path"
MEGAOPS_MATMUL_PATH=stream MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 $(left 470) $BIN/megaops_gpu_tests \
  --gtest_filter='Overlap.*:OverlapDeathTest.*:FullSize/Overlap*' > $O/overlap_tests_stream.log 2>&1
grep -E "^\[  (PASSED|FAILED) |FAILED" $O/overlap_tests_stream.log | tail -12 | tee -a $O/run.log
for p in llama3.2-1b llama3.1-8b; do
  log "bench overlap $p stream"
  MEGAOPS_MATMUL_PATH=stream timeout $(left 520) $BIN/megaops bench --preset $p --batch 1 \
    --prompt 32 --gen 128 --repeats 3 --pdl off --backend overlap \
    --json $O/bench_overlap_stream_$p.json >> $O/run.log 2>&1
done
log "ncu streaming kernel, llama3.1-8b"
MEGAOPS_MATMUL_PATH=stream timeout -k 5 $(left 585) ncu --clock-control none \
  --kernel-name regex:matmul_stream --launch-skip 200 --launch-count 4 --set full \
  -o $O/ncu_stream $BIN/megaops bench --preset llama3.1-8b --batch 1 --prompt 32 --gen 8 \
  --repeats 1 --pdl off > $O/ncu_stream.log 2>&1 &&
  ncu --import $O/ncu_stream.ncu-rep --page details > $O/ncu_stream.txt 2>&1
log "done"
cp $O/run.log "$OUT/"
call_finish
