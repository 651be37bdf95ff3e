#!/usr/bin/env bash
# Seventeenth session, third device call (one H200, <= 9.5 minutes). Build (scripts/pack_variants.sh
# main): 26d72c3 (the chain folds qkv_rope into attention; its cached keys load before the wait).
#   1. The table: four presets, batch 1 / 8 / 32, conventional PDL off / on and the chain.
#   2. HF transformers vs megaops with PDL (check-logits --pdl; the chain is bit-equal to
#      conventional + PDL, FullSize/OverlapFullSize.*_chain): llama3.2-1b, qwen3-0.6b.
#   3. The chain soaked against conventional + PDL at batch 1 (folds on): llama3.2-1b.
#   4. compute-sanitizer racecheck over the folds' tests and the chain's, with what is left.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
B=$X/main
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for m in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  bench_rows table_$m $B 560 --preset $m --batch 1,8,32 --pdl both --backend both \
    --overlap-streams 1 --overlap-pdl-chain
done
for m in llama3.2-1b qwen3-0.6b; do
  log "HF transformers vs megaops (PDL): $m"
  dir=/tmp/megaops-ckpt/$m
  $B/megaops init-random --preset $m --out $dir > $O/hf_init_$m.log 2>&1
  timeout $(left 560) python3 scripts/hf_compare.py --model $dir --out /tmp/hf-$m.safetensors \
    --prompt 32 --steps 65 > $O/hf_compare_$m.log 2>&1
  timeout $(left 560) $B/megaops check-logits --model $dir --expected /tmp/hf-$m.safetensors \
    --pdl --json $O/hf_check_$m.json > $O/hf_check_$m.log 2>&1
  echo "check-logits rc=$?" | tee -a $O/run.log
  tail -n 3 $O/hf_check_$m.log | tee -a $O/run.log
done
s=150
log "soak llama3.2-1b batch 1, chain, $s s"
MEGAOPS_SOAK_SECONDS=$s MEGAOPS_SOAK_PRESET=llama3.2-1b MEGAOPS_SOAK_BATCH=1 MEGAOPS_SOAK_PDL_CHAIN=1 \
  timeout -k 5 $((s + 60)) $B/megaops_gpu_tests --gtest_filter=Overlap.Soak \
  --gtest_output=json:$O/soak.json > $O/soak.log 2>&1
echo "soak rc=$?" | tee -a $O/run.log
grep -E "^soak:|PASSED|FAILED|watchdog|tokens .* vs" $O/soak.log | tail -5 | tee -a $O/run.log
F='RopeFold*:MatmulTest.*Fold*:Overlap.PdlChain*'
log "compute-sanitizer racecheck over $F ($(left 570) s)"
MEGAOPS_TEST_STEPS=8 timeout -k 5 $(left 570) compute-sanitizer --tool racecheck --error-exitcode 9 \
  $B/megaops_gpu_tests --gtest_filter="$F" > $O/sanitize_racecheck.log 2>&1
echo "racecheck rc=$?" | tee -a $O/run.log
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED|RUN) |tests ran" $O/sanitize_racecheck.log | tail -6 | tee -a $O/run.log
call_finish
