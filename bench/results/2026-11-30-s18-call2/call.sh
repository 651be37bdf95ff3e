#!/usr/bin/env bash
# Eighteenth session, second device call (one H200, <= 9.5 minutes). Builds
# (scripts/pack_variants.sh land cap main): land = 7c092d2 (x as bf16 in the bulk kernel, three
# CTAs an SM at m = 1); cap = land + dev/diag-bulk-per-sm.patch (MEGAOPS_BULK_PER_SM caps CTAs
# an SM); main = 3bd0878 (before).
#   1. The table (land): four presets, batch 1 / 8 / 32, conventional PDL off / on and the chain.
#   2. Why llama3.1-8b ran 1% slower in call 1: rows alternated main / land / cap at 2 an SM.
#   3. HF transformers vs megaops with PDL (land): llama3.2-1b, qwen3-0.6b.
#   4. compute-sanitizer racecheck over Overlap.PdlChainMatchesConventional alone (land).
. dev/call_lib.sh
unpack_builds
B=$X/land
for m in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  bench_rows table_$m $B 200 --preset $m --batch 1,8,32 --pdl both --backend both \
    --overlap-streams 1 --overlap-pdl-chain
done
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  for m in llama3.2-1b llama3.1-8b; do
    bench_rows main_${m}_r$round $X/main 360 --preset $m $CH
    bench_rows land_${m}_r$round $X/land 360 --preset $m $CH
    MEGAOPS_BULK_PER_SM=2 bench_rows cap2_${m}_r$round $X/cap 360 --preset $m $CH
  done
done
bench_rows main_qwen3-8b $X/main 360 --preset qwen3-8b $CH
bench_rows land_qwen3-8b $X/land 360 --preset qwen3-8b $CH
MEGAOPS_BULK_PER_SM=2 bench_rows cap2_qwen3-8b $X/cap 360 --preset qwen3-8b $CH
for m in llama3.2-1b qwen3-0.6b; do
  log "HF transformers vs megaops (PDL): $m"
  dir=/tmp/megaops-ckpt/$m
  $B/megaops init-random --preset $m --out $dir > $O/hf_init_$m.log 2>&1
  timeout $(left 470) python3 scripts/hf_compare.py --model $dir --out /tmp/hf-$m.safetensors \
    --prompt 32 --steps 65 > $O/hf_compare_$m.log 2>&1
  timeout $(left 470) $B/megaops check-logits --model $dir --expected /tmp/hf-$m.safetensors \
    --pdl --json $O/hf_check_$m.json > $O/hf_check_$m.log 2>&1
  echo "check-logits rc=$?" | tee -a $O/run.log
  tail -n 3 $O/hf_check_$m.log | tee -a $O/run.log
done
F='Overlap.PdlChainMatchesConventional'
log "compute-sanitizer racecheck over $F ($(left 575) s)"
MEGAOPS_TEST_STEPS=8 timeout -k 5 $(left 575) compute-sanitizer --tool racecheck --error-exitcode 9 \
  $B/megaops_gpu_tests --gtest_filter="$F" > $O/sanitize_racecheck.log 2>&1
echo "racecheck rc=$?" | tee -a $O/run.log
grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) |tests ran|RACE|Race" $O/sanitize_racecheck.log | tail -6 | tee -a $O/run.log
call_finish
