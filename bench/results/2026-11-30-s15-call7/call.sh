#!/usr/bin/env bash
# Fifteenth session, device call 7, one H200, ~1 minute. Build `pre` as call 6, whose prelude
# `profile=N` now prints the per-op times (an event after every op, PDL off) to the log. Call 6:
# one launch of the HBM ceiling kernel in the process (1 MB) is enough to slow every later
# decode step (8B batch 1 3%, 0.6B batch 8 8%, 1B batch 1 0.3%), with eager module loading too.
# Which ops get slower?
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
B=$X/pre
export MEGAOPS_BENCH_PRELUDE="profile=32" BENCH_REPEATS=1
bench_rows ceil_8b $B 560 --preset llama3.1-8b --batch 1 --pdl off
MEGAOPS_BENCH_CEILING=skip bench_rows skip_8b $B 560 --preset llama3.1-8b --batch 1 --pdl off
bench_rows ceil_06b $B 560 --preset qwen3-0.6b --batch 8 --pdl off
MEGAOPS_BENCH_CEILING=skip bench_rows skip_06b $B 560 --preset qwen3-0.6b --batch 8 --pdl off
for n in ceil_8b skip_8b ceil_06b skip_06b; do echo "== $n"; grep "prelude profile" $O/$n.log; done | tee -a $O/run.log
call_finish
