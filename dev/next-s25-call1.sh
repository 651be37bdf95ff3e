#!/usr/bin/env bash
# Written in the twenty-fourth session for the next one's first call on one H200 (~420 s).
# Build: scripts/build_variant.sh main; scripts/build_variant.sh packs dev/packs-after-logits.patch;
# scripts/build_variant.sh knobs dev/chain-knobs.patch; scripts/pack_variants.sh main packs knobs
# (check each GIT_SHA against `git log`). Run as `bash dev/next-s25-call1.sh` with carry
# [".carry/pack.tar.xz"].
#   1. llama3.2-1b's 0.75 (dev/README "Next GPU session" item 1): rows, two rounds, of main, the
#      packs after the logits, and the knobs build with early triggers on qkv_proj or down_proj
#      added to O's (the KV cache is in L2 now), on the small models, then main / packs on the 8B;
#   2. a trace of main's 1B chain step;
#   3. racecheck over the argmax epilogue's test; a soak of the rest of the call.
. dev/call_lib.sh
unpack_builds
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
E=MEGAOPS_CHAIN_EARLY_TRIGGER
alternated_rows "main packs knobs eq@knobs@$E=qkv_proj ed@knobs@$E=down_proj" \
  "llama3.2-1b qwen3-0.6b" 120 $CH
alternated_rows "main packs" "llama3.1-8b qwen3-8b" 250 $CH
chain_trace trace_main $X/main llama3.2-1b 265
racecheck_tests $X/main 'MatmulTest.StreamArgmaxEpilogueMatchesGreedyOverY' 330
call_finish
