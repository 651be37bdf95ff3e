#!/usr/bin/env bash
# Twenty-first session, call 2 (one H200): the fixed check_norm_fold (s21-call1 failed
# MatmulTest.StreamDynamicScheduleFolds on the footprint check of params without y), then ncu of
# the bulk kernel's 8B gate_up / down / LM head launches (standalone, bench-matmul) and of
# cuBLASLt's on the same shapes: where the bulk kernel loses 4-9% of the read rate (perf-notes
# item 41: not the access pattern, s21-call1).
. dev/call_lib.sh
unpack_builds
gpu_tests matmul $X/main 150 'MatmulTest.*'
B=$X/main/megaops
log "ncu bulk"
timeout -k 5 200 ncu --clock-control none --kernel-name "regex:matmul_stream_bulk" --launch-skip 24 \
  --launch-count 26 --set full -o $O/ncu_bulk $B bench-matmul --preset llama3.1-8b --batch 1 \
  --paths stream-bulk --launches 2 --repeats 1 >$O/ncu_bulk.log 2>&1
echo "ncu rc=$?" | tee -a $O/run.log
ncu --import $O/ncu_bulk.ncu-rep --page details >$O/ncu_bulk.txt 2>&1
ncu --import $O/ncu_bulk.ncu-rep --page raw --csv >$O/ncu_bulk_raw.csv 2>&1
ncu --import $O/ncu_bulk.ncu-rep --page source --csv --print-source sass --launch-skip 22 --launch-count 1 >$O/ncu_bulk_src_lm.csv 2>&1
log "ncu cublaslt"
timeout -k 5 150 ncu --clock-control none --kernel-name "regex:gemm|gemv|xmma|cutlass|Kernel|sm90" \
  --launch-skip 24 --launch-count 26 --set full -o $O/ncu_lt $B bench-matmul --preset llama3.1-8b \
  --batch 1 --paths cublaslt --launches 2 --repeats 1 >$O/ncu_lt.log 2>&1
echo "ncu rc=$?" | tee -a $O/run.log
ncu --import $O/ncu_lt.ncu-rep --page details >$O/ncu_lt.txt 2>&1
ncu --import $O/ncu_lt.ncu-rep --page raw --csv >$O/ncu_lt_raw.csv 2>&1
grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|Memory Throughput|Registers Per|Grid Size|Block Size|Achieved Occ" $O/ncu_bulk.txt $O/ncu_lt.txt | head -120 | tee -a $O/run.log >/dev/null
call_finish
