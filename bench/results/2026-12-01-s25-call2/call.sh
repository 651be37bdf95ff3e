#!/usr/bin/env bash
# Twenty-fifth session, call 2 on one H200 (~380 s). Builds: main (d2d6058: decode_steps, the
# stream loop) and zc (+ dev/zc-fold.patch: step_advance writes each step's tokens into mapped
# host memory, no copy on the stream between steps; and samples the LM head's argmax packs
# itself, the sampler's op launching nothing; MEGAOPS_SAMPLE_IN_STEP_ADVANCE=0 keeps the sampler).
#   1. zc's GPU tests of what it touches;
#   2. rows alternated, batch 1, conventional + PDL and the chain: main, zc with the sampler, zc;
#   3. a trace of zc's 1B chain step.
. dev/call_lib.sh
unpack_builds
gpu_tests zc_tests $X/zc 200 'Conventional.*:Overlap.GreedyInLmHead*:OverlapDeathTest.*:StepAdvance.*:Overlap.PdlChain*:Overlap.RegionsMatchConventional'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
S=MEGAOPS_SAMPLE_IN_STEP_ADVANCE
alternated_rows "main zs@zc@$S=0 zc" "llama3.2-1b qwen3-0.6b" 300 $CH
alternated_rows "main zs@zc@$S=0 zc" "llama3.1-8b qwen3-8b" 540 $CH
chain_trace trace_zc $X/zc llama3.2-1b 560
call_finish
