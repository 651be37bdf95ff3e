#!/usr/bin/env bash
# Tenth session, device call 6 (2026-11-30), one H200: what the per-thread release of b45448f costs
# the small models' steps, same machine, rows alternated. Builds: main = 651395e (build/ of this
# checkout), lane0 = 651395e + dev/stream-bulk-lane0-release.patch (one arrival per consumer warp,
# as before b45448f); scripts/pack_variants.sh main lane0.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for r in 1 2 3; do
  for b in main lane0; do
    log "bench-matmul $b qwen3-0.6b r$r"
    MEGAOPS_GIT_SHA=$(cat $X/$b/GIT_SHA) timeout 60 $X/$b/megaops bench-matmul --preset qwen3-0.6b \
      --batch 1 --paths stream-bulk --json $O/bm_${b}_r$r.json > $O/bm_${b}_r$r.log 2>&1
    grep -E "^(qkv|o_proj|gate|down)" $O/bm_${b}_r$r.log | tee -a $O/run.log
    for p in llama3.2-1b qwen3-0.6b; do
      log "bench $b $p r$r"
      MEGAOPS_GIT_SHA=$(cat $X/$b/GIT_SHA) timeout $(left 400) $X/$b/megaops bench --preset $p \
        --batch 1 --prompt 32 --gen 128 --repeats 3 --pdl both --backend both \
        --json $O/bench_${b}_${p}_r$r.json > $O/bench_${b}_${p}_r$r.log 2>&1
      grep -E "^(conventional|overlap)" $O/bench_${b}_${p}_r$r.log | tee -a $O/run.log
    done
  done
done
call_finish
