#!/usr/bin/env bash
# Twelfth session, device call 7 (~2.5 minutes, one H200): is the host's per-step round trip
# (graph launch, token copy, synchronisation) part of the decode step, and is it what differs
# after a graph prefill (perf-notes item 29)? `pipe` = 5a468ed + dev/decode-pipelined.patch:
# with MEGAOPS_BENCH_PIPELINE=1 bench enqueues the 127 decode steps back to back (each reads the
# tokens the previous sampled on the device) and synchronises once. Six repeats a row.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x
export BENCH_REPEATS=6
nvidia-smi --query-gpu=name,driver_version --format=csv | tee -a $O/run.log
for p in llama3.2-1b qwen3-0.6b llama3.1-8b; do
  bench_rows main_$p $X/main 280 --preset $p --batch 1 --pdl both
  MEGAOPS_BENCH_PIPELINE=1 bench_rows pipe_$p $X/pipe 280 --preset $p --batch 1 --pdl both
  MEGAOPS_BENCH_PIPELINE=1 bench_rows pipegraph_$p $X/pipe 280 --preset $p --batch 1 --pdl both \
    --prefill graph
done
call_finish
