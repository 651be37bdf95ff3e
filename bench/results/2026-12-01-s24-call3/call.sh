#!/usr/bin/env bash
# Twenty-fourth session, call 3 on one H200 (~300 s): `g` = e7d29ec + dev/s24-g.patch (greedy
# sampling in the LM head's epilogue, on by default, MEGAOPS_GREEDY_IN_LM_HEAD=0 off; the L2
# evict_first policy under MEGAOPS_STREAM_L2_EVICT_FIRST=1), `next` = g + chain-knobs.patch.
# Why call 2's `next` ran the 8B chains 0.03-0.05 ms slower than main: rows of llama3.1-8b with
# g's knobs one at a time, o_proj's early trigger with evict_first, and traces of the 8B chain
# with greedy in the LM head on and off; then the small models with evict_first and o_proj's
# early trigger on g and next.
. dev/call_lib.sh
unpack_builds
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
G=MEGAOPS_GREEDY_IN_LM_HEAD V=MEGAOPS_STREAM_L2_EVICT_FIRST E=MEGAOPS_CHAIN_EARLY_TRIGGER
alternated_rows "main g g0@g@$G=0 gv@g@$V=1 kv@next@$V=1 kveo@next@$V=1@$E=o_proj" llama3.1-8b 230 $CH
MEGAOPS_GREEDY_IN_LM_HEAD=1 chain_trace trace8_g $X/g llama3.1-8b 260
MEGAOPS_GREEDY_IN_LM_HEAD=0 chain_trace trace8_g0 $X/g llama3.1-8b 290
alternated_rows "main gv@g@$V=1 kv@next@$V=1 kveo@next@$V=1@$E=o_proj" "llama3.2-1b qwen3-0.6b" 360 $CH
call_finish
