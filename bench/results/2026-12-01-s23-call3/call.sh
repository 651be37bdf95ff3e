#!/usr/bin/env bash
# Twenty-third session, call 3 (~450 s): the residual add in the O and down projections'
# epilogue (dev/resid-epilogue.patch: the folded norms after them read the fp32 residual alone).
# Builds: main (HEAD, with the x prologue), resadd (+resid-epilogue), resaddmarks (+diag-marks).
#   0. resadd's kernel and chain tests (the chain's bit-equality with and without the epilogue);
#   1. rows alternated, batch 1, conventional + PDL and chain: main / resadd, four presets;
#   2. traces with marks of the 1B and 8B chains.
. dev/call_lib.sh
unpack_builds
gpu_tests resadd_tests $X/resadd 200 'MatmulTest.Stream*:MatmulTest.*Rejected*:MatmulTest.InvalidParams*:Chain/*:Overlap.PdlChain*:FullSize/OverlapFullSize.*b1_chain'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
alternated_rows "main resadd" "llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b" 540 $CH
for m in llama3.2-1b llama3.1-8b; do
  timeout $(left 590) $X/resaddmarks/megaops trace --preset $m --batch 1 --streams 1 --pdl-chain \
    --out $O/trace_marks_$m.json > $O/trace_marks_$m.log 2>&1
  grep "step span" $O/trace_marks_$m.log | tee -a $O/run.log
done
call_finish
