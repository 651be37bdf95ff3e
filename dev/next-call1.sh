#!/usr/bin/env bash
# Prepared in the fifteenth session for the next one's first device call (~9 minutes, one H200).
# Builds (scripts/build_variant.sh, then scripts/pack_variants.sh main diag):
#   main = HEAD;  diag = HEAD + dev/bench-prelude.patch + dev/bench-tokens-hash.patch
#   1. racecheck over DecodeAttention.* with room (RELIABILITY.md "Open").
#   2. Item 29 without the ceiling in the process: graph vs layer prefill, six repeats, step
#      times and token hashes (llama3.1-8b and llama3.2-1b, PDL off).
#   3. Item 35's next question on qwen3-0.6b batch 8 PDL off (1.19 fast / 1.30 slow): which part
#      of the in-process ceiling measurement leaves the step slow.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "racecheck DecodeAttention.*"
BIN=$X/main OUT=$O/san SANITIZE_TOOLS=racecheck SANITIZE_FILTER='DecodeAttention.*' SANITIZE_LIMIT=240 \
  timeout $(left 260) scripts/gpu_run.sh sanitize > $O/san.log 2>&1
tail -n 6 $O/san.log | tee -a $O/run.log
export BENCH_REPEATS=6
for p in llama3.1-8b llama3.2-1b; do
  bench_rows layers_$p $X/diag 560 --preset $p --batch 1 --pdl off --step-times
  bench_rows graph_$p $X/diag 560 --preset $p --batch 1 --pdl off --step-times --prefill graph
done
export BENCH_REPEATS=3
for v in none inproc run run+n22 run+ev run+destroy run+n22+ev+destroy; do
  if [ $v = none ]; then
    bench_rows c35_$v $X/diag 580 --preset qwen3-0.6b --batch 8 --pdl off
  else
    MEGAOPS_BENCH_CEILING=$v bench_rows c35_$v $X/diag 580 --preset qwen3-0.6b --batch 8 --pdl off
  fi
done
call_finish
