#!/usr/bin/env bash
# Device calls 2 and 3 of the fifth session (2026-11-29), nvidia-h200-x2, build .carry/x/main
# (main e10e19a: the overlap step with stream-ordered vendor GEMMs). Call 2 starts three detached
# jobs and returns before the 10-minute command limit; call 3 (issued at once, so the machine is
# still held) waits for them and archives everything into $OUT/all.tgz:
#   GPU 0: the 600 s soak (Overlap.Soak), and beside it compute-sanitizer memcheck, synccheck and
#          racecheck over the GPU test suite;
#   GPU 1: the planner validation protocol (scripts/planner_protocol.sh: 16 profiles, pools, every
#          candidate).
#   bash call.sh start    (call 2)      bash call.sh collect   (call 3)
set -u
R=/tmp/r
if [ "${1:-}" = start ]; then
  mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
  export NCCL_NVLS_ENABLE=0 BIN=.carry/x/main
  mkdir -p $R
  date +%s > $R/t0
  setsid nohup bash -c "CUDA_VISIBLE_DEVICES=0 OUT=$R/soak SOAK_SECONDS=600 scripts/gpu_run.sh soak > $R/run_soak.log 2>&1; touch $R/soak.done" >/dev/null 2>&1 < /dev/null &
  setsid nohup bash -c "CUDA_VISIBLE_DEVICES=0 OUT=$R/san SANITIZE_TOOLS='memcheck synccheck racecheck' SANITIZE_LIMIT=800 scripts/gpu_run.sh sanitize > $R/run_san.log 2>&1; touch $R/san.done" >/dev/null 2>&1 < /dev/null &
  # (It ran as protocol.sh in this folder, since folded into scripts/planner_protocol.sh: the same
  # commands, only its BIN default differed, .carry/x/main, which BIN above sets.)
  setsid nohup bash -c "CUDA_VISIBLE_DEVICES=1 bash scripts/planner_protocol.sh $R/protocol > $R/run_protocol.log 2>&1; touch $R/protocol.done" >/dev/null 2>&1 < /dev/null &
  wait_s=${WAIT_S:-570}
else
  wait_s=${WAIT_S:-540}
fi
t=$(date +%s)
while [ $(( $(date +%s) - t )) -lt "$wait_s" ]; do
  [ -f $R/soak.done ] && [ -f $R/san.done ] && [ -f $R/protocol.done ] && break
  sleep 5
done
echo "after $(( $(date +%s) - $(cat $R/t0) )) s: $(ls $R/*.done 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
tail -3 $R/run_soak.log $R/run_san.log 2>/dev/null
tail -20 $R/run_protocol.log 2>/dev/null
if [ "${1:-}" = collect ]; then
  cp $R/run_*.log "$OUT/" 2>/dev/null
  tar czf "$OUT/all.tgz" -C $R .
fi
