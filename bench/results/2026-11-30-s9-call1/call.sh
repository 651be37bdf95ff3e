#!/usr/bin/env bash
# Ninth session, device call A (2026-11-30), one H200, ~7 minutes. Carry .carry/pack.tar.xz with
# `combo` (main + dev/overlap-step-carveout.patch + dev/stream-bulk.patch; the conventional step
# runs main's kernels unless MEGAOPS_STREAM_KERNEL / MEGAOPS_MATMUL_PATH say otherwise).
#   1. MatmulTest.* (both streaming kernel versions against the reference, the stale-ring test).
#   2. bench-matmul m = 1: ring vs bulk (ring slots 4 / 8 / 12) vs cuBLASLt, llama3.1-8b and
#      llama3.2-1b shapes, without and with PDL.
#   3. The conventional step b1, PDL off / on: default, bulk for the PDL-on QKV / O, and every
#      matmul on the bulk kernel (MEGAOPS_MATMUL_PATH=stream), four presets, 8B rows alternated.
# Everything in $OUT/all.tgz.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
B=.carry/x/combo
export MEGAOPS_GIT_SHA=$(cat $B/GIT_SHA)
log "MatmulTest"
timeout 150 $B/megaops_gpu_tests --gtest_filter='MatmulTest.*' > $O/tests_matmul.log 2>&1
echo "rc $?" >> $O/tests_matmul.log
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|rc " $O/tests_matmul.log | tee -a $O/run.log
for p in llama3.1-8b llama3.2-1b; do
  log "bench-matmul $p"
  timeout $(left 300) $B/megaops bench-matmul --preset $p --batch 1 \
    --paths stream,stream-bulk,cublaslt --stages 4,8,12 --json $O/bm_$p.json 2>&1 | tee -a $O/run.log
done
log "bench-matmul llama3.1-8b pdl"
timeout $(left 320) $B/megaops bench-matmul --preset llama3.1-8b --batch 1 --pdl \
  --paths stream,stream-bulk,cublaslt --stages 0 --json $O/bm_llama3.1-8b_pdl.json 2>&1 | tee -a $O/run.log
bench() {  # NAME PRESET [ENV=V ...]
  local name=$1 preset=$2
  shift 2
  log "bench $name"
  env "$@" timeout $(left 540) $B/megaops bench --preset $preset --batch 1 --prompt 32 --gen 128 \
    --repeats 3 --pdl both --json $O/bench_$name.json 2>&1 | grep -E "^(model|$preset)" | tee -a $O/run.log
}
BULK=MEGAOPS_STREAM_KERNEL=bulk
ALL=MEGAOPS_MATMUL_PATH=stream
for r in 1 2; do
  bench 8b_default_r$r llama3.1-8b
  bench 8b_bulk_r$r llama3.1-8b $BULK
  bench 8b_bulkall_r$r llama3.1-8b $BULK $ALL
done
bench 8b_ringall llama3.1-8b $ALL
for p in qwen3-8b llama3.2-1b qwen3-0.6b; do
  bench ${p}_default $p
  bench ${p}_bulk $p $BULK
  bench ${p}_bulkall $p $BULK $ALL
done
if [ $(left 560) -gt 70 ]; then
  # launches 0-495: QKV and O (8 eager + 240 in graphs each); 496-499: gate_up's eager ones.
  log "ncu bulk gate_up"
  timeout -k 5 $(left 560) ncu --clock-control none --kernel-name regex:matmul_stream_bulk \
    --launch-skip 496 --launch-count 2 --set full -o $O/ncu_bulk $B/megaops bench-matmul \
    --preset llama3.1-8b --batch 1 --paths stream-bulk --stages 0 > $O/ncu_bulk.log 2>&1
  ncu --import $O/ncu_bulk.ncu-rep --page details > $O/ncu_bulk.txt 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Achieved Occupancy|dram__bytes" $O/ncu_bulk.txt | head -20 | tee -a $O/run.log
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
call_finish
