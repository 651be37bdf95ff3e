#!/usr/bin/env bash
# Eighth session, device calls 1 and 2 (2026-11-30), nvidia-h200-x2, build .carry/x/main (3b7cbed,
# the code of main; readflush = 3b7cbed + dev/tune-read-flush.patch). Call 1 starts detached jobs
# and returns before the 10-minute command limit; call 2 (issued at once, so the machine is still
# held) waits for them and archives everything into $OUT/all.tgz:
#   GPU 0: the planner validation protocol, round 3 (scripts/planner_protocol.sh: 16 profiles, the
#          pools from the planner of the carried build, every candidate, the report), then
#          next-call1.sh (tuned cuBLASLt profile, 8B step with tuning off / on / read flush,
#          the batch-8 overlap bench). Timings: GPU 0 runs nothing else.
#   GPU 1: the 600 s soak (Overlap.Soak) on the current step, and beside it (time-sliced, no
#          timings) every GPU test (`TEST_FILTER='*' gpu_run.sh tests`: the overlap executor's
#          tests included) and
#          compute-sanitizer memcheck + synccheck: the first GPU run of the code changed after
#          the seventh session's last GPU result.
#   bash call.sh start    (call 1)      bash call.sh collect   (call 2)
set -u
R=/tmp/r
export NCCL_NVLS_ENABLE=0 BIN=.carry/x/main
if [ "${1:-}" = start ]; then
  mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
  mkdir -p $R
  date +%s > $R/t0
  setsid nohup bash -c "
    export CUDA_VISIBLE_DEVICES=0
    bash scripts/planner_protocol.sh $R/protocol > $R/run_protocol.log 2>&1
    touch $R/protocol.done
    OUT=$R/next timeout -k 5 500 bash bench/results/2026-11-30-s8-call1/next-call1.sh > $R/run_next.log 2>&1
    touch $R/gpu0.done" >/dev/null 2>&1 < /dev/null &
  setsid nohup bash -c "
    export CUDA_VISIBLE_DEVICES=1
    OUT=$R/soak SOAK_SECONDS=600 scripts/gpu_run.sh soak > $R/run_soak.log 2>&1 &
    OUT=$R/tests TEST_FILTER='*' MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 900 scripts/gpu_run.sh tests > $R/run_tests.log 2>&1 &
    OUT=$R/san SANITIZE_TOOLS='memcheck synccheck' SANITIZE_LIMIT=500 scripts/gpu_run.sh sanitize > $R/run_san.log 2>&1 &
    wait
    touch $R/gpu1.done" >/dev/null 2>&1 < /dev/null &
  wait_s=${WAIT_S:-575}
else
  wait_s=${WAIT_S:-570}
fi
t=$(date +%s)
while [ $(( $(date +%s) - t )) -lt "$wait_s" ]; do
  [ -f $R/gpu0.done ] && [ -f $R/gpu1.done ] && break
  sleep 5
done
echo "after $(( $(date +%s) - $(cat $R/t0) )) s: $(ls $R/*.done 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
tail -3 $R/run_soak.log $R/run_san.log $R/run_tests.log 2>/dev/null
tail -12 $R/run_protocol.log 2>/dev/null
tail -5 $R/run_next.log 2>/dev/null
if [ "${1:-}" = collect ]; then
  cp $R/run_*.log "$OUT/" 2>/dev/null
  tar czf "$OUT/all.tgz" -C $R .
fi
