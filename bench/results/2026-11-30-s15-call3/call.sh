#!/usr/bin/env bash
# Fifteenth session, device call 3, one H200, ~2.5 minutes. Build `pre` = d541f5d +
# dev/bench-prelude.patch (now with MEGAOPS_BENCH_CEILING) + dev/bench-tokens-hash.patch.
# Call 2: no prelude of profile's reproduces its faster step; what is left that bench does and
# profile does not is the HBM ceiling's 4 GiB buffer, allocated, read and freed before the
# executor allocates its weights. Rows alternated: the ceiling before (as main), after the
# executor ("late"), and with a 256 MB buffer before.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
B=$X/pre
r8() { bench_rows "$1" $B 560 --preset llama3.1-8b --batch 1 --pdl both --step-times; }
for r in 1 2; do
  r8 early${r}_8b
  MEGAOPS_BENCH_CEILING=late r8 late${r}_8b
done
MEGAOPS_BENCH_CEILING=256 r8 mb256_8b
for p in llama3.2-1b qwen3-0.6b qwen3-8b; do
  bench_rows early_$p $B 560 --preset $p --batch 1 --pdl both
  MEGAOPS_BENCH_CEILING=late bench_rows late_$p $B 560 --preset $p --batch 1 --pdl both
done
call_finish
