#!/usr/bin/env bash
# Eighth session, device call 4 (2026-11-30), one H200. Carry .carry/pack.tar.xz with `carve`
# (d9bd3c9 + dev/uniform-carveout.patch: MEGAOPS_UNIFORM_CARVEOUT=1 asks every own kernel for the
# maximum shared carveout at executor start) and `readflush` (3b7cbed + dev/tune-read-flush.patch).
#   1. readflush's matmul tests (MatmulTest.*, TunedCublasLtMatchesReference among them).
#   2. The carveout experiment (docs/perf-notes.md item 20): bench rows with the knob off and on,
#      alternated (off, on, off, on) so drift shows; llama3.1-8b and llama3.2-1b b1, qwen3-0.6b b1,
#      llama3.1-8b b32; then the 8B's QKV / O on the streaming kernel with the knob off and on.
# Everything in $OUT/all.tgz.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
sha() { cat .carry/x/$1/GIT_SHA; }
log "readflush MatmulTest.*"
timeout $(left 120) .carry/x/readflush/megaops_gpu_tests --gtest_filter='MatmulTest.*' \
  > $O/readflush_matmul_tests.log 2>&1
grep -E "^\[  (PASSED|FAILED)|FAILED" $O/readflush_matmul_tests.log
bench() {  # NAME PRESET BATCH [ENV=V ...]
  local name=$1 preset=$2 batch=$3
  shift 3
  log "bench $name"
  env "$@" MEGAOPS_GIT_SHA=$(sha carve) timeout $(left 560) .carry/x/carve/megaops bench \
    --preset $preset --batch $batch --prompt 32 --gen 128 --repeats 3 --pdl both \
    --json $O/bench_$name.json 2>&1 | grep -E "^(model|$preset)" | tee -a $O/run.log
}
for r in 1 2; do
  for c in 0 1; do bench 8b_b1_carve${c}_r$r llama3.1-8b 1 MEGAOPS_UNIFORM_CARVEOUT=$c; done
done
for r in 1 2; do
  for c in 0 1; do bench 1b_b1_carve${c}_r$r llama3.2-1b 1 MEGAOPS_UNIFORM_CARVEOUT=$c; done
done
for c in 0 1; do bench 06b_b1_carve${c} qwen3-0.6b 1 MEGAOPS_UNIFORM_CARVEOUT=$c; done
for c in 0 1; do bench 8b_b32_carve${c} llama3.1-8b 32 MEGAOPS_UNIFORM_CARVEOUT=$c; done
for c in 0 1; do
  bench 8b_b1_stream_carve$c llama3.1-8b 1 MEGAOPS_UNIFORM_CARVEOUT=$c \
    MEGAOPS_MATMUL_STREAM_SHAPES=6144x4096,4096x4096
done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
call_finish
