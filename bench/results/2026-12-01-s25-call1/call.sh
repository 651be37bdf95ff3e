#!/usr/bin/env bash
# Twenty-fifth session, call 1 on one H200 (~480 s). Builds: main (6b8e52a: decode_steps, bench
# --decode-loop stream by default), packs (+ packs-after-logits.patch), knobs (+ chain-knobs.patch).
#   1. The 1B / 0.6B chain: main's stream loop against its sync loop (the host's round trip off the
#      GPU's path), packs placement, early triggers on qkv_proj / down_proj; then the 8B presets:
#      sync / stream / packs.
#   2. The new GPU test (decode_steps against decode_step) and the executor's input errors.
#   3. A trace of main's 1B chain step; racecheck over the argmax epilogue's test.
. dev/call_lib.sh
unpack_builds
gpu_tests steps $X/main 120 'Conventional.DecodeSteps*:Conventional.InputErrors:Conventional.GreedyInLmHead*'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
E=MEGAOPS_CHAIN_EARLY_TRIGGER
alternated_rows "sync@main@--decode-loop=sync main packs sp@packs@--decode-loop=sync eq@knobs@$E=qkv_proj ed@knobs@$E=down_proj" \
  "llama3.2-1b qwen3-0.6b" 210 $CH
alternated_rows "sync@main@--decode-loop=sync main packs" "llama3.1-8b qwen3-8b" 400 $CH
chain_trace trace_main $X/main llama3.2-1b 420
racecheck_tests $X/main 'MatmulTest.StreamArgmaxEpilogueMatchesGreedyOverY' 500
call_finish
