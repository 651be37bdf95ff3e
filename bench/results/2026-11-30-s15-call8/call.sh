#!/usr/bin/env bash
# Fifteenth session, device call 8, one H200, ~1.5 minutes. Build `pre` as call 7, whose
# MEGAOPS_BENCH_CEILING also takes nostream (one 1 MB launch of the ceiling kernel on the legacy
# stream), tiny (one CTA, on a stream destroyed after), keep (1 MB on a stream never destroyed)
# and samelate (1 MB on the executor's own stream, after it is built). Call 7: after the ceiling
# kernel every op of a layer takes ~0.45 us longer per launch (a boundary cost). What triggers it?
# qwen3-0.6b batch 8, PDL off (1.19 vs 1.30 ms in calls 6 and 7), two rounds.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
B=$X/pre
for r in 1 2; do
  for v in main skip nostream tiny keep samelate; do
    if [ $v = main ]; then
      bench_rows ${v}$r $B 560 --preset qwen3-0.6b --batch 8 --pdl off
    else
      MEGAOPS_BENCH_CEILING=$v bench_rows ${v}$r $B 560 --preset qwen3-0.6b --batch 8 --pdl off
    fi
  done
done
call_finish
