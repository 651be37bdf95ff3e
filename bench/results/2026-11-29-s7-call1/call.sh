#!/usr/bin/env bash
# The next session's first device call (dev/README "Next GPU session" step 1), one H200. Carry
# .carry/pack.tar.xz with three builds (scripts/build_variant.sh main; scripts/build_variant.sh
# minbar dev/overlap-minimal-barriers.patch; scripts/build_variant.sh wide dev/tp-reduce-wide.patch;
# scripts/pack_variants.sh main minbar wide). minbar: the overlap tests, then main and minbar's
# overlap step (four presets, batch 1 and 32) one after the other, and the profile of
# llama3.1-8b batch 1 with each (its serial_overlap_step_us is the barrier cost's direct measure).
# main's GPU unit tests run first. Everything in $OUT/all.tgz.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
# main's GPU tests first: main's GPU code changed after the sixth session's last device call
# (MatmulContext's knobs and set-up, the shared CUDA owners; MatmulTest.EnvironmentKnobs is new).
OUT=$O/main_tests BIN=.carry/x/main timeout $(left 120) scripts/gpu_run.sh tests \
  > $O/run_main_tests.log 2>&1
OUT=$O/minbar OVERLAP_TEST_LIMIT=200 OVERLAP_BATCHES=1,32 BIN=.carry/x/minbar \
  timeout $(left 300) scripts/gpu_run.sh overlap > $O/run_minbar.log 2>&1
OUT=$O/main OVERLAP_TEST_FILTER=NoSuch.Test OVERLAP_BATCHES=1,32 BIN=.carry/x/main \
  timeout $(left 400) scripts/gpu_run.sh overlap > $O/run_main.log 2>&1
for b in main minbar; do
  MEGAOPS_GIT_SHA=$(cat .carry/x/$b/GIT_SHA) timeout $(left 470) .carry/x/$b/megaops profile \
    --preset llama3.1-8b --batch 1 --json $O/profile_${b}_llama3.1-8b_b1.json >> $O/run_$b.log 2>&1
done
# Issue 2 (8B PDL on): QKV / O on the streaming kernel (4 ring slots) vs cuBLASLt in the step;
# with PDL the streaming kernel measured ahead standalone (O 11.2 vs 13.1 us, QKV 15.4 vs 16.5).
for shapes in none "6144x4096,4096x4096"; do
  env=()
  [ "$shapes" != none ] && env=(MEGAOPS_MATMUL_STREAM_SHAPES=$shapes)
  env "${env[@]}" MEGAOPS_GIT_SHA=$(cat .carry/x/main/GIT_SHA) timeout $(left 540) \
    .carry/x/main/megaops bench --preset llama3.1-8b --batch 1 --prompt 32 --gen 128 --repeats 3 \
    --pdl both --json $O/bench_8b_stream_shapes_${shapes//,/_}.json >> $O/run_main.log 2>&1
done
cp $O/run_*.log "$OUT/" 2>/dev/null
call_finish
