#!/usr/bin/env bash
# Tenth session, device call 4 (2026-11-30), one H200. Builds as in -s10-call2 (main = b45448f,
# carvediag = main + dev/overlap-step-carveout.patch + dev/overlap-step-carveout-diag.patch),
# scripts/pack_variants.sh main carvediag.
#   1. The step split's hang without the batch switch: fresh executors decoding only batch 8 on
#      the overlap step with the split as chosen (15% there), with every matmul on megaops'
#      small-m kernel (no cuBLASLt GEMM in the step), and with a 64 KB split forced (28%).
#   2. main: the README table (four presets, batch 1 / 8 / 32, conventional PDL off / on, overlap).
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for v in "auto:" "small:MEGAOPS_MATMUL_PATH=small" "f28:MEGAOPS_OVERLAP_STEP_CARVEOUT=28" \
         "f100:MEGAOPS_OVERLAP_STEP_CARVEOUT=100"; do
  for p in llama3.2-1b qwen3-0.6b; do
    name=${v%%:*}; envs=${v#*:}
    log "carvediag $name $p b8"
    env $envs MEGAOPS_OVERLAP_CARVEOUT_LOG=1 MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 60 $X/carvediag/megaops bench \
      --preset $p --batch 8 --prompt 32 --gen 64 --repeats 1 --backend overlap > $O/carve_${name}_$p.log 2>&1
    echo "rc $?" | tee -a $O/run.log
    grep -E "^carveout|watchdog|^overlap|error" $O/carve_${name}_$p.log | sort -u | head -6 | tee -a $O/run.log
  done
done
for p in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  log "bench $p"
  MEGAOPS_GIT_SHA=$(cat $X/main/GIT_SHA) timeout $(left 560) $X/main/megaops bench --preset $p \
    --batch 1,8,32 --prompt 32 --gen 128 --repeats 3 --pdl both --backend both \
    --json $O/bench_$p.json > $O/bench_$p.log 2>&1
  echo "rc $?" | tee -a $O/run.log
  grep -E "^(backend|conventional|overlap)" $O/bench_$p.log | tee -a $O/run.log
done
call_finish
