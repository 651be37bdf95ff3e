#!/usr/bin/env bash
# Twenty-second session, fifth device call (one H200). Builds (scripts/pack_variants.sh main fin
# combo): main = f42dc84; fin = main + dev/final-fold.patch; combo = fin +
# dev/greedy-clusters.patch. Call 4 measured combo level with main; which half does what:
#   1. traces of the chain step (llama3.2-1b, llama3.1-8b) of the three: the final norm, LM head
#      and sampler spans;
#   2. rows alternated, batch 1, main / fin, llama3.2-1b and llama3.1-8b.
. dev/call_lib.sh
unpack_builds
for v in main fin combo; do
  for m in llama3.2-1b llama3.1-8b; do
    timeout 40 $X/$v/megaops trace --preset $m --batch 1 --streams 1 --pdl-chain \
      --out $O/trace_${v}_$m.json > $O/trace_${v}_$m.log 2>&1
    echo "$v $m $(grep 'step span' $O/trace_${v}_$m.log)" | tee -a $O/run.log
  done
done
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for m in llama3.2-1b llama3.1-8b; do
  for v in main fin fin main; do bench_rows ${v}_${m}_$RANDOM $X/$v 300 --preset $m $CH; done
done
call_finish
