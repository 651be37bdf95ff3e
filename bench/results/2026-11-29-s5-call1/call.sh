#!/usr/bin/env bash
# Device call 1 of the fifth session (2026-11-29), nvidia-h200-x2. Two builds carried in
# .carry/pack.tar.xz: base = main 2626569 (never run on the GPU since the refactors after call 3 of
# the fourth session), stack = 2626569 + dev/overlap-vendor-stream-order + dev/tp-peer-reduce +
# dev/bench-many-plans. GPU 0: base GPU tests + overlap tests + overlap bench (b1, b32). GPU 1:
# stack overlap tests + overlap bench (b1, b32) + W = 2, 4. Then both GPUs: stack TP tests (both
# reductions) + TP 2 bench, NCCL vs peer reduce. Everything in $OUT/all.tgz.
set -u
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }
# (It ran with a copy of the stack's scripts/gpu_run.sh over main's, the script committed at
# e10e19a; main's later scripts/gpu_run.sh runs the same steps, so the copy is gone.)
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
export NCCL_NVLS_ENABLE=0
O=/tmp/o; mkdir -p $O
( export CUDA_VISIBLE_DEVICES=0 BIN=.carry/x/base
  OUT=$O/base OVERLAP_TEST_LIMIT=200 OVERLAP_BATCHES=1,32 timeout $(left 320) scripts/gpu_run.sh tests overlap > $O/run_base.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1 BIN=.carry/x/stack
  OUT=$O/stack OVERLAP_TEST_LIMIT=200 OVERLAP_BATCHES=1,32 OVERLAP_STREAMS="2 4" timeout $(left 320) scripts/gpu_run.sh overlap > $O/run_stack.log 2>&1 ) &
wait
OUT=$O/tp BIN=.carry/x/stack TEST_FILTER='TensorParallel*:PeerReduce*' TP_SIZES=2 TP_REDUCES="nccl peer" TP_LIMIT=100 \
  timeout $(left 565) scripts/gpu_run.sh tests tp > $O/run_tp.log 2>&1
cp $O/run_*.log "$OUT/" 2>/dev/null
tar czf "$OUT/all.tgz" -C $O .
echo "call done after $(( $(date +%s) - t0 )) s"
