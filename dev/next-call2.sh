#!/usr/bin/env bash
# The next session's second and third device calls (dev/README "Next GPU session" item 1, after
# prefill-decode-graph.patch landed), nvidia-h200-x2, build .carry/x/main = the landed commit
# (scripts/build_variant.sh main; scripts/pack_variants.sh main). Call 2 starts detached jobs and
# returns; call 3, issued at once (a lent machine goes back after 30 s idle), waits and archives
# everything into $OUT/all.tgz:
#   GPU 0: issue 4's TTFT half: PROTOCOL_OBJECTIVES=ttft scripts/planner_protocol.sh (16 profiles
#          with prefill_us, pools of the layer prefill and the decode-graph replays of every step
#          composition, every candidate measured, the report). Timings: GPU 0 runs nothing else.
#   GPU 1: the 600 s soak (Overlap.Soak) on the landed build, and beside it (time-sliced, no
#          timings) every GPU test and compute-sanitizer memcheck + synccheck: the first such
#          run since b45448f (e111589 shortened the waits' sleep; the patch moved decode_step's
#          launch into run_step and added the graph prefill).
#   bash dev/next-call2.sh start    (call 2)      bash dev/next-call2.sh collect   (call 3)
. dev/call_lib.sh
export R=/tmp/r BIN=.carry/x/main
if [ "${1:-}" = start ]; then
  mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
  mkdir -p $R
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
  setsid nohup bash -c "
    export CUDA_VISIBLE_DEVICES=0 PROTOCOL_OBJECTIVES=ttft
    bash scripts/planner_protocol.sh $R/protocol > $R/run_protocol.log 2>&1
    touch $R/gpu0.done" >/dev/null 2>&1 < /dev/null &
  setsid nohup bash -c "
    export CUDA_VISIBLE_DEVICES=1
    OUT=$R/soak SOAK_SECONDS=600 scripts/gpu_run.sh soak > $R/run_soak.log 2>&1 &
    OUT=$R/tests TEST_FILTER='*' MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 900 scripts/gpu_run.sh tests > $R/run_tests.log 2>&1 &
    OUT=$R/san SANITIZE_TOOLS='memcheck synccheck' SANITIZE_LIMIT=500 scripts/gpu_run.sh sanitize > $R/run_san.log 2>&1 &
    wait
    touch $R/gpu1.done" >/dev/null 2>&1 < /dev/null &
  wait_s=${WAIT_S:-20}
else
  wait_s=${WAIT_S:-580}
fi
wait_done "$wait_s" gpu0 gpu1
cat $R/gpu.txt
tail -3 $R/run_soak.log $R/run_san.log $R/run_tests.log 2>/dev/null
tail -25 $R/run_protocol.log 2>/dev/null
if [ "${1:-}" = collect ]; then
  tar czf "$OUT/all.tgz" -C $R .
fi
