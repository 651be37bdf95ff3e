#!/usr/bin/env bash
# Seventh session, device call 2 (one H200). Carry .carry/pack.tar.xz with three builds: minbar
# (589d33a + the minimal-barriers patch: the code of 7ea5f6d); of 7ea5f6d: ceil = +
# dev/bench-ceiling-after.patch (bench measures the HBM ceiling after the weights are resident;
# not kept: it moved those two lines below the executor's construction); tc = + dev/cublaslt-tune.patch (landed
# as 95d9b61, with tuning made opt-in) + the ceiling patch (cuBLASLt algorithms
# of decode problems timed and the fastest kept). Benchmarks first, on a quiet GPU; then tc's
# GPU tests, overlap tests (with the overlap bench at batch 1) and the HF logits check; then the
# standalone matmul table of tc. Everything in $OUT/all.tgz.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
bench() {  # bench BUILD PRESET
  log "bench $2 ($1)"
  MEGAOPS_GIT_SHA=$(cat .carry/x/$1/GIT_SHA) timeout 90 .carry/x/$1/megaops bench --preset $2 \
    --batch 1 --prompt 32 --gen 128 --repeats 3 --pdl both --json $O/bench_${2}_$1.json \
    >> $O/run.log 2>&1
}
# Issue 2: the 8B, conventional, PDL off and on: minbar vs ceil (ceiling order) vs tc (+ tuning).
for b in minbar ceil tc; do bench $b llama3.1-8b; done
for p in llama3.2-1b qwen3-0.6b; do for b in ceil tc; do bench $b $p; done; done
log "tc tests"
OUT=$O/tc BIN=.carry/x/tc OVERLAP_TEST_LIMIT=200 OVERLAP_BATCHES=1 timeout $(left 480) \
  scripts/gpu_run.sh tests overlap hf > $O/run_tc.log 2>&1
log "tc bench-matmul"
timeout $(left 560) .carry/x/tc/megaops bench-matmul --preset llama3.1-8b --batch 1 \
  --paths cublaslt,cublaslt-tuned --json $O/bench_matmul_llama3.1-8b_tc.json >> $O/run.log 2>&1
timeout $(left 585) .carry/x/tc/megaops bench-matmul --preset qwen3-0.6b --batch 1 \
  --paths small,cublaslt,cublaslt-tuned --json $O/bench_matmul_qwen3-0.6b_tc.json >> $O/run.log 2>&1
cp $O/run*.log "$OUT/" 2>/dev/null
call_finish
