#!/usr/bin/env bash
# Eighth session, device call 5 (2026-11-30), one H200. Carry .carry/pack.tar.xz with `carve2`
# (c5ed40f + dev/uniform-carveout.patch: MEGAOPS_UNIFORM_CARVEOUT=1 | 2 asks every own kernel | only
# the norms and attention for the maximum shared carveout at executor start;
# MEGAOPS_NO_CARVEOUT=1 makes preload_kernel leave the driver's split, the overlap executor's too).
#   1. llama3.1-8b / qwen3-8b b1: the default step against QKV / O on the streaming kernel with the
#      carveout on the norms and attention (2) and on every kernel (1), rows alternated.
#   2. llama3.2-1b / qwen3-0.6b b1: the default step with MEGAOPS_UNIFORM_CARVEOUT=2 against 0.
#   3. The overlap step with and without the carveout (MEGAOPS_NO_CARVEOUT), b1, three presets.
# Everything in $OUT/all.tgz.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
B=.carry/x/carve2
ST=MEGAOPS_MATMUL_STREAM_SHAPES=6144x4096,4096x4096
bench() {  # NAME PRESET BACKEND [ENV=V ...]
  local name=$1 preset=$2 backend=$3
  shift 3
  log "bench $name"
  env "$@" MEGAOPS_GIT_SHA=$(cat $B/GIT_SHA) timeout $(left 560) $B/megaops bench \
    --preset $preset --batch 1 --prompt 32 --gen 128 --repeats 3 --pdl both --backend $backend \
    --json $O/bench_$name.json 2>&1 | grep -E "^(model|backend|conventional|overlap|$preset)" | tee -a $O/run.log
}
for r in 1 2; do
  bench 8b_default_r$r llama3.1-8b conventional
  bench 8b_stream_carve2_r$r llama3.1-8b conventional $ST MEGAOPS_UNIFORM_CARVEOUT=2
  bench 8b_stream_carve1_r$r llama3.1-8b conventional $ST MEGAOPS_UNIFORM_CARVEOUT=1
done
bench q8b_default qwen3-8b conventional
bench q8b_stream_carve2 qwen3-8b conventional $ST MEGAOPS_UNIFORM_CARVEOUT=2
for p in llama3.2-1b qwen3-0.6b; do
  bench ${p}_carve0 $p conventional
  bench ${p}_carve2 $p conventional MEGAOPS_UNIFORM_CARVEOUT=2
done
for p in llama3.2-1b qwen3-0.6b llama3.1-8b; do
  bench ${p}_overlap_carveout $p overlap
  bench ${p}_overlap_nocarveout $p overlap MEGAOPS_NO_CARVEOUT=1
done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
call_finish
