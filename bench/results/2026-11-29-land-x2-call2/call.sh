#!/usr/bin/env bash
# Device call 2 of 2026-11-29 (fourth session), nvidia-h200-x2: the `land` build (main + the
# overlap / regions / wait-backoff / TP patches + the deadlock fixes) against the two GPUs.
# Carry [".carry/pack.tar.xz"] (land + base). Everything ends in $OUT/all.tgz.
set -u
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x && cp .carry/x/land/gpu_run.sh scripts/gpu_run.sh
export NCCL_NVLS_ENABLE=0 BIN=.carry/x/land
O=/tmp/o; mkdir -p $O
nvidia-smi --query-gpu=index,clocks.sm,temperature.gpu,power.draw --format=csv -l 5 > $O/clocks.csv 2>&1 &
smi=$!
# A: every GPU test but the overlap executor's (TileGate, TP = 1 and TP = 2 included)
OUT=$O/a timeout 110 scripts/gpu_run.sh tests > $O/run_a.log 2>&1
# B: tensor-parallel decode, tp 1 and 2
OUT=$O/b TP_PRESETS="qwen3-8b llama3.1-8b" TP_SIZES="1 2" timeout $(left 300) scripts/gpu_run.sh tp > $O/run_b.log 2>&1
# S: sanitizers on GPU 1 while C runs on GPU 0
( export CUDA_VISIBLE_DEVICES=1
  OUT=$O/s1 SANITIZE_TOOLS="memcheck synccheck" SANITIZE_LIMIT=100 timeout $(left 500) scripts/gpu_run.sh sanitize > $O/run_s1.log 2>&1
  OUT=$O/s2 SANITIZE_TOOLS=racecheck SANITIZE_LIMIT=$(left 545) timeout $(left 550) scripts/gpu_run.sh sanitize > $O/run_s2.log 2>&1 ) &
san=$!
# C: overlap tests (full-size presets included), overlap vs conventional, wait-cap and v0 rows, trace
export CUDA_VISIBLE_DEVICES=0
OUT=$O/c OVERLAP_TEST_LIMIT=200 OVERLAP_BATCHES=1,8,32 \
  OVERLAP_ENVS="s0:MEGAOPS_TILE_WAIT_MAX_NS=0 s256:MEGAOPS_TILE_WAIT_MAX_NS=256" OVERLAP_FLAGS="v0:--overlap-v0" \
  timeout $(left 520) scripts/gpu_run.sh overlap trace > $O/run_c.log 2>&1
wait $san
kill $smi
cp $O/run_*.log "$OUT/" 2>/dev/null
tar czf "$OUT/all.tgz" -C $O .
echo "call done after $(( $(date +%s) - t0 )) s"
