#!/usr/bin/env bash
# Sixth session, device call 5 (one H200, ~7 minutes of device time left): round 2 of the planner
# validation protocol on the frozen planner of c7b06be (the round-2 model: graph_step_us,
# serial_overlap_step_us, pools with all-conventional), on the subset the time allows: the four
# presets at batch 1 and 8. Fresh profiles, pools, every candidate, the report. Carry .carry/bin.
set -u
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
PROTOCOL_PRESETS="llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b" PROTOCOL_BATCHES="1 8" \
  BIN=.carry/bin timeout -k 5 400 scripts/planner_protocol.sh /tmp/p > /tmp/run_protocol.log 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > /tmp/p/gpu.txt
cp /tmp/run_protocol.log /tmp/p/
tar czf "$OUT/protocol.tgz" -C /tmp/p .
tail -30 /tmp/run_protocol.log
