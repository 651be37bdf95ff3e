#!/usr/bin/env bash
# Seventh session, device calls 3 and 4 (one H200): compute-sanitizer memcheck + synccheck (one
# detached job) and racecheck (a second detached job, concurrently) over the GPU test suite's
# sanitizer filter (scripts/gpu_run.sh sanitize: MEGAOPS_TEST_STEPS=8, MEGAOPS_MATMUL_TUNE=0),
# build tc of the pack (7ea5f6d + dev/cublaslt-tune.patch + dev/bench-ceiling-after.patch; with
# MEGAOPS_MATMUL_TUNE=0 its executors run the code that landed, tuning opt-in).
#   bash bench/results/2026-11-29-s7-call3/call.sh start     (call 3)
#   bash bench/results/2026-11-29-s7-call3/call.sh collect   (call 4)
set -u
R=/tmp/r
export NCCL_NVLS_ENABLE=0 BIN=.carry/x/tc
if [ "${1:-}" = start ]; then
  mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
  mkdir -p $R
  date +%s > $R/t0
  setsid nohup bash -c "OUT=$R/mem SANITIZE_TOOLS='memcheck synccheck' SANITIZE_LIMIT=400 scripts/gpu_run.sh sanitize > $R/run_mem.log 2>&1; touch $R/mem.done" >/dev/null 2>&1 < /dev/null &
  setsid nohup bash -c "OUT=$R/race SANITIZE_TOOLS=racecheck SANITIZE_LIMIT=780 scripts/gpu_run.sh sanitize > $R/run_race.log 2>&1; touch $R/race.done" >/dev/null 2>&1 < /dev/null &
  wait_s=${WAIT_S:-570}
else
  wait_s=${WAIT_S:-560}
fi
t=$(date +%s)
while [ $(( $(date +%s) - t )) -lt "$wait_s" ]; do
  [ -f $R/mem.done ] && [ -f $R/race.done ] && break
  sleep 5
done
echo "after $(( $(date +%s) - $(cat $R/t0) )) s: $(ls $R/*.done 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
tail -5 $R/run_mem.log $R/run_race.log 2>/dev/null
cp $R/run_*.log "$OUT/" 2>/dev/null
tar czf "$OUT/all.tgz" -C $R .
