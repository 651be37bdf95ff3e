#!/usr/bin/env bash
# Twenty-second session, second device call (one H200), build main (f8aeb7b): traces of the 8B
# chains on the aligned ring (where each op's span and handoff stand against its floor), and
# racecheck over two more Chain/OverlapPdlChain cases (RELIABILITY.md "Open").
. dev/call_lib.sh
unpack_builds
for m in llama3.1-8b qwen3-8b; do
  log "trace main $m chain"
  timeout 60 $X/main/megaops trace --preset $m --batch 1 --streams 1 --pdl-chain \
    --out $O/trace_main_$m.json > $O/trace_main_$m.log 2>&1
  grep "step span" $O/trace_main_$m.log | tee -a $O/run.log
done
for c in tiny_llama3_b3 tiny_qwen3_b3; do
  racecheck_tests $X/main "Chain/OverlapPdlChain.MatchesConventional/$c" 120
  mv $O/sanitize_racecheck.log $O/racecheck_$c.log
done
call_finish
