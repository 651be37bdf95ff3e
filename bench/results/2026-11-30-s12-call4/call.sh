#!/usr/bin/env bash
# Twelfth session, device call 6 (~3 minutes, one H200), build .carry/x/main = 5a468ed:
#   1. the HF comparison on the landed dispatch (the 0.6B's gate_up moved to the streaming kernel,
#      which changes its arithmetic): llama3.2-1b and qwen3-0.6b, default prefill.
#   2. perf-notes item 29: the SM / memory clocks and power, sampled every 50 ms, while batch-1
#      PDL-off decode runs after the layer prefill and after the graph prefill (12 repeats on the
#      1B, 6 on the 8B). A slow stretch with a lower SM clock points at the GPU's power state; the
#      same clocks point at the driver or launch path.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee -a $O/run.log
log "hf"
OUT=$O/hf BIN=$X/main timeout 200 scripts/gpu_run.sh hf > $O/hf.log 2>&1
echo "rc $?" | tee -a $O/run.log; grep check-logits $O/hf.log | tee -a $O/run.log
clocked() {  # NAME, then bench_rows' arguments after the name
  local name=$1
  shift
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv,noheader -lms 50 > "$O/clocks_$name.csv" 2>&1 &
  local smi=$!
  date +%T.%N > "$O/t_$name.txt"
  bench_rows "$name" "$@"
  date +%T.%N >> "$O/t_$name.txt"
  kill $smi
  # SM clock: distribution over the run.
  awk -F', ' '{print $2}' "$O/clocks_$name.csv" | sort | uniq -c | sort -rn | head -5 | tee -a $O/run.log
}
for p in llama3.2-1b:12 llama3.1-8b:6; do
  pre=${p%%:*}; n=${p#*:}
  BENCH_REPEATS=$n clocked layers_$pre $X/main 230 --preset $pre --batch 1 --pdl off
  BENCH_REPEATS=$n clocked graph_$pre $X/main 230 --preset $pre --batch 1 --pdl off --prefill graph
done
call_finish
