#!/usr/bin/env bash
# Twenty-third session, call 4 (~300 s): ring slots filled before the wait
# (dev/ring-prewait.patch, MEGAOPS_STREAM_PREWAIT=N: N slots before the wait, the rest after x's
# loads, so x's round trip is not queued behind the whole ring's fill in CTAs that start late).
# Builds: main (HEAD), pre (+ring-prewait), premarks (+diag-marks).
. dev/call_lib.sh
unpack_builds
MEGAOPS_STREAM_PREWAIT=1 gpu_tests pre1_tests $X/pre 120 'MatmulTest.Stream*:Chain/*_b1:Chain/*_b2'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for round in 1 2; do
  for m in llama3.2-1b llama3.1-8b; do
    order="main p0 p3 p2 p1"
    [ $round = 2 ] && order="p1 p2 p3 p0 main"
    for v in $order; do
      case $v in
        main) bench_rows main_${m}_r$round $X/main 480 --preset $m $CH ;;
        p0) bench_rows pre0_${m}_r$round $X/pre 480 --preset $m $CH ;;
        *) MEGAOPS_STREAM_PREWAIT=${v#p} bench_rows pre${v#p}_${m}_r$round $X/pre 480 --preset $m $CH ;;
      esac
    done
  done
done
for m in llama3.2-1b llama3.1-8b; do
  MEGAOPS_STREAM_PREWAIT=2 timeout $(left 560) $X/premarks/megaops trace --preset $m --batch 1 \
    --streams 1 --pdl-chain --out $O/trace_marks_p2_$m.json > $O/trace_marks_p2_$m.log 2>&1
  grep "step span" $O/trace_marks_p2_$m.log | tee -a $O/run.log
done
call_finish
