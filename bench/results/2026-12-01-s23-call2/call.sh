#!/usr/bin/env bash
# Twenty-third session, call 2 (~450 s): the bulk kernel's prologue after the wait
# (dev/x-prologue.patch: x loaded four chunks a thread at a time, the norm's gain staged in shared
# memory before the wait, the fold's loads all in flight together). Builds: main (HEAD), xfast
# (+x-prologue), xfastmarks (+x-prologue+diag-marks). carry [".carry/pack.tar.xz"].
#   0. the bulk kernel's and the chain's correctness tests on xfast;
#   1. rows alternated, batch 1, conventional + PDL and chain: main / xfast, four presets;
#   2. traces with marks of the 1B and 8B chains (x ready, first stage, last store).
. dev/call_lib.sh
unpack_builds
gpu_tests xfast_tests $X/xfast 170 'MatmulTest.*:Chain/*:Overlap.PdlChain*:FullSize/OverlapFullSize.*/llama3_2_1b_b1_chain:FullSize/OverlapFullSize.*/llama3_1_8b_b1_chain:FullSize/OverlapFullSize.*/qwen3_0_6b_b32_chain'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
alternated_rows "main xfast" "llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b" 540 $CH
for m in llama3.2-1b llama3.1-8b; do
  timeout $(left 590) $X/xfastmarks/megaops trace --preset $m --batch 1 --streams 1 --pdl-chain \
    --out $O/trace_marks_$m.json > $O/trace_marks_$m.log 2>&1
  grep "step span" $O/trace_marks_$m.log | tee -a $O/run.log
done
call_finish
