#!/usr/bin/env bash
# The next session's first device call (dev/README "Next GPU session" step 1), nvidia-h200-x2.
# Carry .carry/pack.tar.xz with three builds (scripts/build_variant.sh main; scripts/build_variant.sh
# sync dev/overlap-sync-plan.patch; scripts/build_variant.sh wide dev/tp-reduce-wide.patch;
# scripts/pack_variants.sh main sync wide). GPU 0: main; GPU 1: main + dev/overlap-sync-plan.patch;
# each: the overlap tests and bench (batch 1 and 32), the embedding-only overlap plan of
# llama3.2-1b batch 1 (round 1 measured 1.278 ms for it against 1.104 all-conventional: the
# serial-region cost the patch removes), and on GPU 0 the profile's new whole-step figures. Then
# both GPUs: main + dev/tp-reduce-wide.patch, the TP tests and TP 2 bench, NCCL vs peer.
# Everything in $OUT/all.tgz.
set -u
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
export NCCL_NVLS_ENABLE=0
O=/tmp/o; mkdir -p $O
plan=dev/plans/llama3.2-1b_b1_embedding_overlap.json
one() {  # NAME GPU
  local name=$1 gpu=$2 bin=.carry/x/$1
  export CUDA_VISIBLE_DEVICES=$gpu
  OUT=$O/$name OVERLAP_TEST_LIMIT=200 OVERLAP_BATCHES=1,32 BIN=$bin \
    timeout $(left 270) scripts/gpu_run.sh overlap > $O/run_$name.log 2>&1
  timeout $(left 300) $bin/megaops bench --preset llama3.2-1b --batch 1 --prompt 32 --gen 128 \
    --repeats 3 --pdl off --plan $plan --json $O/plan_emb_$name.json >> $O/run_$name.log 2>&1
}
( one main 0
  timeout $(left 300) .carry/x/main/megaops profile --preset llama3.2-1b --batch 1 \
    --json $O/profile_llama3.2-1b_b1.json >> $O/run_main.log 2>&1 ) &
( one sync 1 ) &
wait
unset CUDA_VISIBLE_DEVICES
OUT=$O/wide BIN=.carry/x/wide TEST_FILTER='TensorParallel*:PeerReduce*' TP_SIZES=2 \
  TP_REDUCES="nccl peer" TP_LIMIT=100 timeout $(left 570) scripts/gpu_run.sh tests tp \
  > $O/run_wide.log 2>&1
cp $O/run_*.log "$OUT/" 2>/dev/null
tar czf "$OUT/all.tgz" -C $O .
echo "call done after $(( $(date +%s) - t0 )) s"
