#!/usr/bin/env bash
# Eleventh session, device call 4 (2026-11-30), one H200, build .carry/x/main (3a32e94; packed
# with fold by scripts/pack_variants.sh main fold). ~4 minutes. Everything in $OUT/all.tgz.
#   1. The overlap step's timeline on the current kernels (the committed trace predates the bulk
#      streaming kernel and the sync plan): gpu_run.sh trace for llama3.2-1b and qwen3-0.6b
#      (trace JSON, PNGs, trace_report per-op handoffs and spans).
#   2. Where the overlap step's time goes at batch 1, rows alternated twice: conventional vs
#      overlap (default wait back-off, 256 ns cap) vs overlap spinning (MEGAOPS_TILE_WAIT_MAX_NS=0).
#   3. bench-matmul's read path at HEAD (host-side edits after its last GPU run, 651395e..3a32e94).
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x/main
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "trace"
BIN=$X OUT=$O/trace TRACE_PRESETS="llama3.2-1b qwen3-0.6b" timeout 200 scripts/gpu_run.sh trace \
  > $O/trace.log 2>&1; echo "rc $?" | tee -a $O/run.log
for p in llama3.2-1b qwen3-0.6b; do
  python3 scripts/trace_report.py $O/trace/trace_$p.json 2>&1 | tail -25 | tee -a $O/run.log
done
export MEGAOPS_GIT_SHA=$(cat $X/GIT_SHA)
for r in 1 2; do
  for p in llama3.2-1b qwen3-0.6b; do
    log "bench conventional $p r$r"
    timeout $(left 420) $X/megaops bench --preset $p --batch 1 --prompt 32 --gen 128 --repeats 3 \
      --pdl both --json $O/bench_conv_${p}_r$r.json > $O/bench_conv_${p}_r$r.log 2>&1
    grep -E "^$p |rror" $O/bench_conv_${p}_r$r.log | tee -a $O/run.log
    for w in 256 0; do
      log "bench overlap $p wait_max_ns=$w r$r"
      MEGAOPS_TILE_WAIT_MAX_NS=$w timeout $(left 420) $X/megaops bench --preset $p --batch 1 \
        --prompt 32 --gen 128 --repeats 3 --backend overlap \
        --json $O/bench_ovl${w}_${p}_r$r.json > $O/bench_ovl${w}_${p}_r$r.log 2>&1
      grep -E "^overlap |^$p |rror" $O/bench_ovl${w}_${p}_r$r.log | tee -a $O/run.log
    done
  done
done
log "bench-matmul read path"
timeout $(left 460) $X/megaops bench-matmul --preset llama3.1-8b --batch 1 \
  --paths read,cublaslt,stream-bulk --json $O/matmul_8b.json > $O/matmul_8b.log 2>&1
echo "rc $?" | tee -a $O/run.log; tail -12 $O/matmul_8b.log | tee -a $O/run.log
call_finish
