#!/usr/bin/env bash
# The next session's first device call (dev/README "Next GPU session" steps 1 and 3b), one H200,
# ~9 minutes. Carry .carry/pack.tar.xz with two builds: `main` (scripts/build_variant.sh main) and
# `stepcarve` (scripts/build_variant.sh stepcarve dev/overlap-step-carveout.patch), packed with
# scripts/pack_variants.sh main stepcarve. Everything in $OUT/all.tgz.
#   1. The overlap step with the 8B's QKV / O on the streaming kernel (MEGAOPS_MATMUL_STREAM_SHAPES)
#      against main's (cuBLASLt), llama3.1-8b and qwen3-8b, batch 1 and 32, rows alternated.
#   2. stepcarve: its overlap tests, then its overlap step against the old split
#      (MEGAOPS_OVERLAP_STEP_CARVEOUT=0, same binary) on the four presets, rows alternated.
. dev/call_lib.sh
[ -x .carry/x/stepcarve/megaops ] || { mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x; }
ovl() {  # NAME BUILD PRESET [ENV=V ...]
  local name=$1 b=$2 preset=$3
  shift 3
  log "overlap $name"
  env "$@" MEGAOPS_GIT_SHA=$(cat .carry/x/$b/GIT_SHA) timeout $(left 540) .carry/x/$b/megaops \
    bench --preset $preset --batch 1,32 --prompt 32 --gen 128 --repeats 3 --pdl off \
    --backend overlap --json $O/bench_$name.json 2>&1 | grep -E "^overlap" | tee -a $O/run.log
}
ST=MEGAOPS_MATMUL_STREAM_SHAPES=6144x4096,4096x4096
for r in 1 2; do
  for p in llama3.1-8b qwen3-8b; do
    ovl ${p}_cublaslt_r$r main $p
    ovl ${p}_stream_r$r main $p $ST
  done
done
log "stepcarve overlap tests"
OUT=$O/stepcarve_tests BIN=.carry/x/stepcarve OVERLAP_PRESETS=llama3.2-1b OVERLAP_BATCHES=1 \
  timeout $(left 300) scripts/gpu_run.sh overlap > $O/run_stepcarve_tests.log 2>&1
grep -E "PASSED|FAILED|atchdog" $O/run_stepcarve_tests.log | tail -5
for p in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  ovl ${p}_oldsplit stepcarve $p MEGAOPS_OVERLAP_STEP_CARVEOUT=0
  ovl ${p}_stepsplit stepcarve $p
done
cp $O/run*.log "$OUT/" 2>/dev/null
call_finish
