#!/usr/bin/env bash
# Fifteenth session, device call 2, one H200, ~3 minutes. Build `pre` = d541f5d +
# dev/bench-prelude.patch + dev/bench-tokens-hash.patch. Perf-notes item 29: in call 1 `megaops
# profile` timed the 8B's PDL-off step (graph_step_us, bench's own loop: a layer prefill and 127
# decode steps, median of 3) at 4.602 ms where `bench` timed 4.732 on the same machine. What that
# run does first: profile_decode_steps (a captured step with an event after every op) twice, then
# six prefills. Which of them leaves the step fast, and for how many repeats?
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
B=$X/pre
export BENCH_REPEATS=6
r8() { bench_rows "$1" $B 560 --preset llama3.1-8b --batch 1 --pdl off --step-times; }
r8 none_8b
MEGAOPS_BENCH_PRELUDE="profile=32,profile=32,prefill=6" r8 asprofile_8b
MEGAOPS_BENCH_PRELUDE="prefill=6" r8 prefill6_8b
MEGAOPS_BENCH_PRELUDE="profile=32" r8 profile1_8b
MEGAOPS_BENCH_PRELUDE="decode=120" r8 decode_8b
MEGAOPS_BENCH_PRELUDE="sleep=2000" r8 sleep_8b
r8 none2_8b
bench_rows none_1b $B 560 --preset llama3.2-1b --batch 1 --pdl off --step-times
MEGAOPS_BENCH_PRELUDE="profile=32,profile=32,prefill=6" bench_rows asprofile_1b $B 560 --preset llama3.2-1b --batch 1 --pdl off --step-times
log "profile 8b (control)"
timeout $(left 580) $B/megaops profile --preset llama3.1-8b --batch 1 --json $O/prof_8b.json > $O/prof_8b.log 2>&1
grep -E "step \(graph" $O/prof_8b.log | tee -a $O/run.log
call_finish
