#!/usr/bin/env bash
# Eleventh session, device calls 2 and 3 (2026-11-30), one H200, build .carry/x/main (3a32e94,
# scripts/build_variant.sh main; packed with fold by scripts/pack_variants.sh main fold).
# The planner validation protocol, round 4 (docs/planner-validation.md, "After round 3"): 16 fresh
# profiles, the pools planned from them by the carried build's planner (unchanged since 3b7cbed,
# round 3's frozen model), every candidate measured, the report. Nothing else runs on the GPU.
# Call 2 starts it detached and returns; call 3, issued at once, waits and archives $OUT/all.tgz.
#   bash call.sh start    (call 2)      bash call.sh collect   (call 3)
set -u
export R=/tmp/r NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export BIN=.carry/x/main
if [ "${1:-}" = start ]; then
  mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
  mkdir -p $R
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
  setsid nohup bash -c "
    bash scripts/planner_protocol.sh $R/protocol > $R/run_protocol.log 2>&1
    touch $R/gpu0.done" >/dev/null 2>&1 < /dev/null &
  wait_s=${WAIT_S:-20}
else
  wait_s=${WAIT_S:-580}
fi
t=$(date +%s)
while [ $(( $(date +%s) - t )) -lt "$wait_s" ]; do
  [ -f $R/gpu0.done ] && break
  sleep 5
done
echo "after $(( $(date +%s) - $(cat $R/t0) )) s: $(ls $R/*.done 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
cat $R/gpu.txt
tail -25 $R/run_protocol.log 2>/dev/null
if [ "${1:-}" = collect ]; then
  tar czf "$OUT/all.tgz" -C $R .
fi
