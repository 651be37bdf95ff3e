#!/usr/bin/env bash
# The next session's first device call (dev/README "Next GPU session" step 1), one H200. Carry
# .carry/pack.tar.xz with two builds (scripts/build_variant.sh main; scripts/build_variant.sh
# readflush dev/tune-read-flush.patch; scripts/pack_variants.sh main readflush). Where the tuned
# cuBLASLt set loses in the 8B step: per-op profiles with tuning off and on; then the step with
# main (off, on) and readflush (on); then batch 8 of the README table. Everything in $OUT/all.tgz.
. dev/call_lib.sh
[ -x .carry/x/readflush/megaops ] || { mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x; }
sha() { cat .carry/x/$1/GIT_SHA; }
for tune in 0 1; do
  log "profile llama3.1-8b b1, MEGAOPS_MATMUL_TUNE=$tune"
  MEGAOPS_MATMUL_TUNE=$tune MEGAOPS_GIT_SHA=$(sha main) timeout $(left 150) \
    .carry/x/main/megaops profile --preset llama3.1-8b --batch 1 \
    --json $O/profile_llama3.1-8b_b1_tune$tune.json >> $O/run.log 2>&1
done
for run in main:0 main:1 readflush:1; do
  b=${run%:*} tune=${run#*:}
  log "bench llama3.1-8b b1 ($b, MEGAOPS_MATMUL_TUNE=$tune)"
  MEGAOPS_MATMUL_TUNE=$tune MEGAOPS_GIT_SHA=$(sha $b) timeout $(left 300) .carry/x/$b/megaops bench \
    --preset llama3.1-8b --batch 1 --prompt 32 --gen 128 --repeats 3 --pdl both \
    --json $O/bench_llama3.1-8b_${b}_tune$tune.json >> $O/run.log 2>&1
done
# Batch 8 of the README table (its batch-8 column predates the minimal barriers).
OUT=$O/b8 BIN=.carry/x/main OVERLAP_TEST_FILTER=NoSuch.Test OVERLAP_BATCHES=8 \
  timeout $(left 470) scripts/gpu_run.sh overlap > $O/run_b8.log 2>&1
cp $O/run*.log "$OUT/" 2>/dev/null
call_finish
