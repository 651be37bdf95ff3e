#!/usr/bin/env bash
# Tenth session, device call 7 (2026-11-30), one H200: what each small per-layer op costs the
# conventional step, by not launching it (dev/skip-ops-timing.patch, a timing experiment that never
# lands: the tokens are garbage). Build skipops = 1f242a4 + that patch; carry .carry/skipops.
# Batch 1, prompt 32, 128 new, PDL off / on, two rounds alternated.
. dev/call_lib.sh
B=.carry/skipops
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for r in 1 2; do
  for p in llama3.1-8b llama3.2-1b; do
    for v in none input_layernorm,post_attention_layernorm qkv_rope silu_mul attention \
             input_layernorm,post_attention_layernorm,qkv_rope,silu_mul,attention; do
      tag=$(echo $v | tr ',' '+')
      log "$p skip=$v r$r"
      MEGAOPS_DEBUG_SKIP_OPS=$([ $v = none ] || echo $v) MEGAOPS_GIT_SHA=$(cat $B/GIT_SHA) timeout $(left 280) \
        $B/megaops bench --preset $p --batch 1 --prompt 32 --gen 128 --repeats 3 --pdl both \
        --json $O/bench_${p}_${tag}_r$r.json > $O/bench_${p}_${tag}_r$r.log 2>&1
      grep -E "^$p |rror" $O/bench_${p}_${tag}_r$r.log | tee -a $O/run.log
    done
  done
done
call_finish
