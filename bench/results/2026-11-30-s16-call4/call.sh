#!/usr/bin/env bash
# Sixteenth session, fourth device call (one H200, ~5.5 minutes): the PDL chain (grid waits,
# norms and SiLU·mul folded) soaked against conventional + PDL at batch 1, where the folds run.
# Build (scripts/pack_variants.sh soak): the commit that added MEGAOPS_SOAK_PDL_CHAIN.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for spec in llama3.2-1b:170 qwen3-0.6b:120; do
  p=${spec%%:*} s=${spec##*:}
  log "soak $p batch 1, chain, $s s"
  MEGAOPS_SOAK_SECONDS=$s MEGAOPS_SOAK_PRESET=$p MEGAOPS_SOAK_BATCH=1 MEGAOPS_SOAK_PDL_CHAIN=1 \
    timeout -k 5 $((s + 60)) $X/soak/megaops_gpu_tests --gtest_filter=Overlap.Soak \
    --gtest_output=json:$O/soak_$p.json > $O/soak_$p.log 2>&1
  echo "rc=$?" | tee -a $O/run.log
  grep -E "^soak:|PASSED|FAILED|watchdog|tokens .* vs" $O/soak_$p.log | tail -5 | tee -a $O/run.log
done
call_finish
