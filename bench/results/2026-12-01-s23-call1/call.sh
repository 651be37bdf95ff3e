#!/usr/bin/env bash
# Written in the twenty-second session for the next one's first call on one H200 (~400 s).
# Build: scripts/build_variant.sh main; scripts/build_variant.sh marks dev/diag-marks.patch;
# scripts/build_variant.sh gsplit dev/greedy-split.patch; scripts/build_variant.sh clusters
# dev/greedy-clusters.patch; scripts/pack_variants.sh main marks gsplit clusters (check each
# GIT_SHA against `git log`). Run as `bash dev/next-s23-call1.sh` with carry [".carry/pack.tar.xz"].
#   0. gsplit's sampler tests (and the chain's bit-equality at batch 1, which runs the sampler);
#   1. rows alternated, batch 1, conventional + PDL and chain: main / gsplit / clusters;
#   2. traces with marks (marks build) of the 1B and 8B chains: where an op's span after its
#      wait goes (python3 scripts/trace_report.py with the patch applied reads the marks).
. dev/call_lib.sh
unpack_builds
gpu_tests gsplit_sample $X/gsplit 120 'Sample.*:Chain/OverlapPdlChain.MatchesConventional/tiny_*_b1'
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
alternated_rows "main gsplit clusters" "llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b" 560 $CH
for m in llama3.2-1b llama3.1-8b; do
  timeout $(left 590) $X/marks/megaops trace --preset $m --batch 1 --streams 1 --pdl-chain \
    --out $O/trace_marks_$m.json > $O/trace_marks_$m.log 2>&1
  grep "step span" $O/trace_marks_$m.log | tee -a $O/run.log
done
call_finish
