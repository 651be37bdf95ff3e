#!/usr/bin/env bash
# Tenth session, device calls 2 and 3 (2026-11-30), nvidia-h200-x2, builds (scripts/build_variant.sh)
#   main       b45448f (every consumer thread releases a ring slot; the injected-delay test)
#   carvediag  main + dev/overlap-step-carveout.patch + dev/overlap-step-carveout-diag.patch
#   rows4      main + dev/stream-bulk-rows4.patch
# packed with scripts/pack_variants.sh main carvediag rows4. Call 2 starts detached jobs and
# returns before the 10-minute limit; call 3, issued at once, waits and archives $OUT/all.tgz.
#   GPU 0: exp.sh (timed experiments), then racecheck over the whole sanitizer filter on main.
#   GPU 1: the 600 s soak (Overlap.Soak) on main, and beside it (time-sliced, no timings) every
#          GPU test and compute-sanitizer memcheck + synccheck over the sanitizer filter.
#   bash call.sh start    (call 2)      bash call.sh collect   (call 3)
set -u
export R=/tmp/r NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
D=bench/results/2026-11-30-s10-call2
if [ "${1:-}" = start ]; then
  mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
  mkdir -p $R
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
  setsid nohup bash -c "
    export CUDA_VISIBLE_DEVICES=0
    bash $D/exp.sh > $R/run_exp.log 2>&1
    touch $R/gpu0.done" >/dev/null 2>&1 < /dev/null &
  setsid nohup bash -c "
    export CUDA_VISIBLE_DEVICES=1 BIN=.carry/x/main
    OUT=$R/soak SOAK_SECONDS=600 scripts/gpu_run.sh soak > $R/run_soak.log 2>&1 &
    OUT=$R/tests TEST_FILTER='*' MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 900 scripts/gpu_run.sh tests > $R/run_tests.log 2>&1 &
    OUT=$R/san SANITIZE_TOOLS='memcheck synccheck' SANITIZE_LIMIT=500 scripts/gpu_run.sh sanitize > $R/run_san.log 2>&1 &
    wait
    touch $R/gpu1.done" >/dev/null 2>&1 < /dev/null &
  wait_s=${WAIT_S:-560}
else
  wait_s=${WAIT_S:-570}
fi
t=$(date +%s)
while [ $(( $(date +%s) - t )) -lt "$wait_s" ]; do
  [ -f $R/gpu0.done ] && [ -f $R/gpu1.done ] && break
  sleep 5
done
echo "after $(( $(date +%s) - $(cat $R/t0) )) s: $(ls $R/*.done $R/exp/*.done 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
cat $R/gpu.txt
tail -3 $R/run_soak.log $R/run_san.log $R/run_tests.log 2>/dev/null
cat $R/exp/run.log 2>/dev/null | tail -80
if [ "${1:-}" = collect ]; then
  tar czf "$OUT/all.tgz" -C $R .
fi
