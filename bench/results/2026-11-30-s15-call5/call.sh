#!/usr/bin/env bash
# Fifteenth session, device call 5, one H200, ~2 minutes. Build `pre` as call 4, whose
# MEGAOPS_BENCH_CEILING now also takes skip (no ceiling measured: the % column is meaningless),
# stream (a stream created and destroyed instead) and mem (4 GiB allocated, set and freed, no
# kernel of ours). Call 4: profile's whole step 4.531-4.541 ms, bench 4.676-4.689 on the same
# machine; max_seq and the ceiling's buffer size are not it. Is it the ceiling's run at all?
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
B=$X/pre
r8() { bench_rows "$1" $B 560 --preset llama3.1-8b --batch 1 --pdl off --step-times; }
r8 main1
MEGAOPS_BENCH_CEILING=skip r8 skip1
MEGAOPS_BENCH_CEILING=stream r8 stream1
MEGAOPS_BENCH_CEILING=mem r8 mem1
r8 main2
MEGAOPS_BENCH_CEILING=skip r8 skip2
log "profile"
timeout $(left 580) $B/megaops profile --preset llama3.1-8b --batch 1 --json $O/prof.json > $O/prof.log 2>&1
grep -E "step \(graph" $O/prof.log | tee -a $O/run.log
call_finish
