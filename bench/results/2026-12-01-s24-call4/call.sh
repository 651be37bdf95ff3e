#!/usr/bin/env bash
# Twenty-fourth session, call 4 on one H200 (~300 s): `L` = e7d29ec + dev/s24-L.patch, what would
# land: greedy sampling in the LM head's epilogue, the weights' L2 evict_first policy, O's early
# trigger where its weights fit in its rings (each with an environment knob: G, V, O below), the
# packs in the step counter's allocation (no buffer after it moves).
#   0. the new tests and the chain's bit-equality on L (the early trigger is on in the tiny chains);
#   1. rows alternated, PDL on, both backends: the 8B ones (main, L, L with all three off), the
#      small ones (main, L, L without the early trigger).
. dev/call_lib.sh
unpack_builds
gpu_tests new_tests $X/L 120 'MatmulTest.*Argmax*:Sample.*:Conventional.GreedyInLmHead*:Overlap.GreedyInLmHead*:Chain/*_b1:Chain/*_b2:Overlap.PdlChain*:MatmulTest.StreamBulk*'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
G=MEGAOPS_GREEDY_IN_LM_HEAD V=MEGAOPS_STREAM_L2_EVICT_FIRST T=MEGAOPS_CHAIN_O_EARLY_TRIGGER
alternated_rows "main L off@L@$G=0@$V=0@$T=0" "llama3.1-8b qwen3-8b" 330 $CH
alternated_rows "main L noo@L@$T=0" "llama3.2-1b qwen3-0.6b" 380 $CH
call_finish
