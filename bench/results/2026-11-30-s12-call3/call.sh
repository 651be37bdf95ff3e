#!/usr/bin/env bash
# Twelfth session, device calls 3-5 (dev/README "Next GPU session"), nvidia-h200-x2, build
# .carry/x/main = the landed commit (scripts/build_variant.sh main; scripts/pack_variants.sh main).
# `start` launches detached jobs and returns; `collect` (issued at once: a lent machine goes back
# after 30 s idle) waits up to WAIT_S seconds and prints progress; `collect` again until both are
# done, the last one archives everything into $OUT/all.tgz (each collect archives what is there).
#   GPU 0: issue 4's protocol, both objectives, on one commit (scripts/planner_protocol.sh: 16
#          profiles with prefill_us, pools of >= 8 per case for step and TTFT, every candidate
#          measured, the report). Timings: GPU 0 runs nothing else.
#   GPU 1: first the README table of the landed build (four presets, batch 1, 8, 32, PDL off /
#          on, conventional and overlap; timings: nothing else on GPU 1 until it is done), then
#          a 300 s soak (Overlap.Soak), every GPU test and compute-sanitizer memcheck + synccheck
#          side by side (time-sliced, no timings): the first such run since b45448f.
#   bash dev/next-call2.sh start     bash dev/next-call2.sh collect   [bash dev/next-call2.sh collect]
. dev/call_lib.sh
export R=/tmp/r BIN=.carry/x/main
if [ "${1:-}" = start ]; then
  rm -rf $R .carry/x
  mkdir -p .carry/x $R && tar xJf .carry/pack.tar.xz -C .carry/x
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
  setsid nohup bash -c "
    export CUDA_VISIBLE_DEVICES=0
    bash scripts/planner_protocol.sh $R/protocol > $R/run_protocol.log 2>&1
    touch $R/gpu0.done" >/dev/null 2>&1 < /dev/null &
  setsid nohup bash -c "
    export CUDA_VISIBLE_DEVICES=1 MEGAOPS_GIT_SHA=\$(cat $BIN/GIT_SHA)
    mkdir -p $R/readme
    for p in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
      $BIN/megaops bench --preset \$p --batch 1,8,32 --pdl both --backend both \
        --json $R/readme/bench_\$p.json > $R/readme/bench_\$p.log 2>&1
    done
    touch $R/readme.done
    OUT=$R/soak SOAK_SECONDS=300 scripts/gpu_run.sh soak > $R/run_soak.log 2>&1 &
    OUT=$R/tests TEST_FILTER='*' MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 900 scripts/gpu_run.sh tests > $R/run_tests.log 2>&1 &
    OUT=$R/san SANITIZE_TOOLS='memcheck synccheck' SANITIZE_LIMIT=500 scripts/gpu_run.sh sanitize > $R/run_san.log 2>&1 &
    wait
    touch $R/gpu1.done" >/dev/null 2>&1 < /dev/null &
  wait_s=${WAIT_S:-20}
else
  wait_s=${WAIT_S:-570}
fi
wait_done "$wait_s" gpu0 gpu1
cat $R/gpu.txt
grep -h -E " (off|on) +[0-9]|rror" $R/readme/*.log 2>/dev/null
tail -3 $R/run_soak.log $R/run_san.log $R/run_tests.log 2>/dev/null
tail -25 $R/run_protocol.log 2>/dev/null
if [ "${1:-}" = collect ]; then
  mkdir -p "$OUT"
  tar czf "$OUT/all.tgz" -C $R .
fi
