#!/usr/bin/env bash
# The next session's first device call (dev/README "Next GPU session" item 1), one H200, ~6 minutes.
# Carry .carry/pack.tar.xz with two builds:
#   scripts/build_variant.sh main
#   scripts/build_variant.sh fold dev/fold-norms.patch
#   scripts/pack_variants.sh main fold
# Everything in $OUT/all.tgz.
#   1. fold: the new and touched kernel tests, the executor against the oracle with the option on
#      (the option is an ExecutorOptions field; MEGAOPS_FOLD_NORMS=1 also sets it).
#   2. fold: HF logits comparison of llama3.2-1b and qwen3-0.6b with MEGAOPS_FOLD_NORMS=1 (issue
#      2's 2e-2 over 64 steps), through gpu_run.sh hf.
#   3. The step, rows alternated three times: main vs fold with MEGAOPS_FOLD_NORMS=1 (the same fold
#      binary without the variable is main's arithmetic: run it too), llama3.1-8b, llama3.2-1b,
#      qwen3-0.6b, batch 1 and 8, PDL off / on, conventional backend.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "fold tests"
timeout 240 $X/fold/megaops_gpu_tests --gtest_filter='MatmulTest.*:SiluMul.*:QkvRope.*:Embedding.*:ConventionalVsOracle.*:Conventional.*' \
  > $O/tests_fold.log 2>&1; echo "rc $?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $O/tests_fold.log | tee -a $O/run.log
log "hf with fold"
MEGAOPS_FOLD_NORMS=1 OUT=$O/hf BIN=$X/fold timeout 200 scripts/gpu_run.sh hf > $O/hf_fold.log 2>&1
echo "rc $?" | tee -a $O/run.log; tail -8 $O/hf_fold.log | tee -a $O/run.log
for r in 1 2 3; do
  for v in main:main:0 fold:fold:1 foldoff:fold:0; do
    name=${v%%:*}; rest=${v#*:}; b=${rest%%:*}; f=${rest#*:}
    for p in llama3.1-8b llama3.2-1b qwen3-0.6b; do
      log "bench $name $p r$r"
      MEGAOPS_FOLD_NORMS=$f MEGAOPS_GIT_SHA=$(cat $X/$b/GIT_SHA)$([ $f = 1 ] && echo +fold) \
        timeout $(left 560) $X/$b/megaops bench --preset $p --batch 1,8 --prompt 32 --gen 128 \
        --repeats 3 --pdl both --json $O/bench_${name}_${p}_r$r.json > $O/bench_${name}_${p}_r$r.log 2>&1
      grep -E "^$p |rror" $O/bench_${name}_${p}_r$r.log | tee -a $O/run.log
    done
  done
done
call_finish
