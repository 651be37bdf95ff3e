#!/usr/bin/env bash
# Fifteenth session, device call 9, one H200, ~5 minutes. Builds: `base` = d541f5d (main: bench
# measures the HBM ceiling in its own process, before loading the model); `fix` = d541f5d +
# dev/ceiling-child.patch (bench and bench-matmul measure it with `megaops hbm-ceiling` in a
# child process). Calls 5-8: one launch of the ceiling kernel in the timing process lengthens
# every later kernel boundary by ~0.45 us.
#   1. Rows alternated base / fix: llama3.1-8b batch 1 and qwen3-0.6b batch 8, PDL both.
#   2. The full table of `fix` (gpu_run.sh bench: four presets, batch 1 / 8 / 32, PDL off / on).
#   3. The overlap backend (PDL chain) beside conventional on the small models, batch 1.
#   4. bench-matmul on the 8B shapes (cuBLASLt and the bulk streaming kernel), with the ceiling
#      out of process: the per-launch figures perf-notes' gap section relies on.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for r in 1 2; do
  for v in base fix; do
    bench_rows ab${r}_${v}_8b $X/$v 560 --preset llama3.1-8b --batch 1 --pdl both
    bench_rows ab${r}_${v}_06b $X/$v 560 --preset qwen3-0.6b --batch 8 --pdl both
  done
done
log "full table (fix)"
BIN=$X/fix OUT=$O/table timeout $(left 520) scripts/gpu_run.sh bench > $O/table.log 2>&1
grep -E " (off|on) +[0-9]|rror" $O/table.log | tee -a $O/run.log
for p in llama3.2-1b qwen3-0.6b; do
  bench_rows chain_$p $X/fix 560 --preset $p --batch 1 --backend overlap --overlap-streams 1 --overlap-pdl-chain
done
log "bench-matmul 8b"
MEGAOPS_GIT_SHA=$(cat $X/fix/GIT_SHA) timeout $(left 590) $X/fix/megaops bench-matmul --preset llama3.1-8b \
  --paths cublaslt,stream-bulk --json $O/matmul_8b.json > $O/matmul_8b.log 2>&1
tail -n 20 $O/matmul_8b.log | tee -a $O/run.log
call_finish
