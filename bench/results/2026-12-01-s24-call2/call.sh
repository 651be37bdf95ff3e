#!/usr/bin/env bash
# Twenty-fourth session, call 2 on one H200 (~450 s): builds `main` (e7d29ec) and `next`
# (e7d29ec + dev/s24-next.patch: greedy sampling in the LM head's epilogue, on by default and
# MEGAOPS_GREEDY_IN_LM_HEAD=0 off; the bulk kernel's weight copies with an L2 evict_first policy
# under MEGAOPS_STREAM_L2_EVICT_FIRST=1; chain-knobs.patch's knobs).
#   0. the new tests and the chain's bit-equality on `next`;
#   1. rows alternated, PDL on, both backends: main, next (greedy in the LM head), next with it
#      off, next + evict_first, next + evict_first + o_proj's early trigger; small models, then
#      the 8B ones;
#   2. traces of the 1B chain step: next, next + evict_first.
. dev/call_lib.sh
unpack_builds
gpu_tests new_tests $X/next 150 'MatmulTest.*Argmax*:Sample.*:Conventional.GreedyInLmHead*:Overlap.GreedyInLmHead*:Chain/*_b1:Chain/*_b2:MatmulTest.StreamSilu*:MatmulTest.StreamNormFold*:MatmulTest.StreamDynamic*'
MEGAOPS_STREAM_L2_EVICT_FIRST=1 gpu_tests evict_tests $X/next 60 'MatmulTest.StreamBulk*:MatmulTest.StreamMatches*:Chain/*_b1'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
G=MEGAOPS_GREEDY_IN_LM_HEAD V=MEGAOPS_STREAM_L2_EVICT_FIRST E=MEGAOPS_CHAIN_EARLY_TRIGGER
alternated_rows "main next off@next@$G=0 ev@next@$V=1 eveo@next@$V=1@$E=o_proj" \
  "llama3.2-1b qwen3-0.6b" 330 $CH
alternated_rows "main next ev@next@$V=1" "llama3.1-8b qwen3-8b" 520 $CH
chain_trace trace_next $X/next llama3.2-1b 540
MEGAOPS_STREAM_L2_EVICT_FIRST=1 chain_trace trace_ev $X/next llama3.2-1b 550
call_finish
