#!/usr/bin/env bash
# Ninth session, device call B (2026-11-30), one H200, ~9 minutes, the `combo` build of call A
# (main + overlap-step-carveout + stream-bulk). Everything in $OUT/all.tgz.
#   1. bench-matmul m = 1: the bulk kernel's ring slots 2-6 against cuBLASLt and small-m, three presets.
#   2. The conventional step b1, PDL off / on, with the bulk kernel at 4 slots on chosen shapes
#      (MEGAOPS_MATMUL_STREAM_SHAPES) or all (MEGAOPS_MATMUL_PATH=stream), four presets.
#   3. The overlap step b1 with the 8B's QKV / O on the bulk kernel against cuBLASLt.
#   4. The step carveout: the overlap tests, then the overlap step with one split per step against
#      the maximum split of every kernel (MEGAOPS_OVERLAP_STEP_CARVEOUT=0), four presets, alternated.
. dev/call_lib.sh
[ -x .carry/x/combo/megaops ] || { mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x; }
B=.carry/x/combo
export MEGAOPS_GIT_SHA=$(cat $B/GIT_SHA)
for p in llama3.1-8b llama3.2-1b qwen3-0.6b; do
  log "bench-matmul $p"
  timeout $(left 200) $B/megaops bench-matmul --preset $p --batch 1 \
    --paths small,stream-bulk,cublaslt --stages 2,3,4,5,6 --json $O/bm_$p.json 2>&1 | tee -a $O/run.log
done
bench() {  # NAME PRESET BACKEND PDL BATCHES [ENV=V ...]
  local name=$1 preset=$2 backend=$3 pdl=$4 batches=$5
  shift 5
  log "bench $name"
  env "$@" timeout $(left 560) $B/megaops bench --preset $preset --batch $batches --prompt 32 \
    --gen 128 --repeats 3 --pdl $pdl --backend $backend --json $O/bench_$name.json 2>&1 |
    grep -E "^(model|backend|overlap|$preset)" | tee -a $O/run.log
}
K="MEGAOPS_STREAM_KERNEL=bulk MEGAOPS_STREAM_STAGES=4"
S=MEGAOPS_MATMUL_STREAM_SHAPES
for r in 1 2; do
  bench 8b_default_r$r llama3.1-8b conventional both 1
  bench 8b_qkvo_r$r llama3.1-8b conventional both 1 $K $S=6144x4096,4096x4096
  bench 8b_qkvod_r$r llama3.1-8b conventional both 1 $K $S=6144x4096,4096x4096,4096x14336
done
bench q8b_default qwen3-8b conventional both 1
bench q8b_qkvo qwen3-8b conventional both 1 $K $S=6144x4096,4096x4096
for r in 1 2; do
  bench 1b_default_r$r llama3.2-1b conventional both 1
  bench 1b_all_r$r llama3.2-1b conventional both 1 $K MEGAOPS_MATMUL_PATH=stream
  bench 1b_qkvod_r$r llama3.2-1b conventional both 1 $K $S=3072x2048,2048x2048,2048x8192
  bench 06b_default_r$r qwen3-0.6b conventional both 1
  bench 06b_all_r$r qwen3-0.6b conventional both 1 $K MEGAOPS_MATMUL_PATH=stream
  bench 06b_qkvod_r$r qwen3-0.6b conventional both 1 $K $S=4096x1024,1024x2048,1024x3072
done
for p in llama3.1-8b qwen3-8b; do
  bench ${p}_ovl_cublaslt $p overlap off 1
  bench ${p}_ovl_bulk $p overlap off 1 $K $S=6144x4096,4096x4096
done
log "overlap tests (step carveout)"
OUT=$O/overlap_tests BIN=$B OVERLAP_PRESETS=llama3.2-1b OVERLAP_BATCHES=1 \
  timeout $(left 420) scripts/gpu_run.sh overlap > $O/run_overlap_tests.log 2>&1
grep -E "PASSED|FAILED|atchdog" $O/run_overlap_tests.log | tail -5 | tee -a $O/run.log
for p in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  bench ${p}_oldsplit $p overlap off 1,32 MEGAOPS_OVERLAP_STEP_CARVEOUT=0
  bench ${p}_stepsplit $p overlap off 1,32
done
call_finish
