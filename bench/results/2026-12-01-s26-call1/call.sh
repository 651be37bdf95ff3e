#!/usr/bin/env bash
# Twenty-sixth session, call 1 on one H200 (≤ 590 s), build main (07f7d89, the kernels of 1e63d58):
#   1. a trace of the llama3.2-1b PDL-chain step (for docs/ and the README);
#   2. the table again (four presets, batch 1 / 8 / 32, PDL off / on / chain, stream loop);
#   3. racecheck over the norm fold's matmul test and the chain's batch-12 cases (4 steps), with
#      whatever is left of the call (an earlier attempt ran out of time in tiny_qwen3_b12 at 250 s).
. dev/call_lib.sh
unpack_builds
log "trace"
chain_trace trace_main $X/main llama3.2-1b 60
cp "$O/trace_main.json" "$OUT/" 2>/dev/null || true
table_rows $X/main 260
MEGAOPS_TEST_STEPS=4 racecheck_tests $X/main \
  'MatmulTest.StreamNormFoldMatchesNormThenMatmul:*OverlapPdlChain.MatchesConventional/*12*' \
  "$(left 575)"
call_finish
