#!/usr/bin/env bash
# Eighth session, device call 7 (2026-11-30), one H200. Carry .carry/pack.tar.xz with `land`
# (ef393ec). compute-sanitizer memcheck and synccheck over the tests that run the new
# launch path (the 8B-width models with PDL: the streaming QKV / O after a norm and an attention
# launched with the carveout attribute) and the matmul tests. Everything in $OUT/all.tgz.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
OUT=$O/san BIN=.carry/x/land SANITIZE_TOOLS='memcheck synccheck' SANITIZE_LIMIT=80 \
  SANITIZE_FILTER='Conventional.EightB*:MatmulTest.Stream*:MatmulTest.PdlChain*' \
  timeout $(left 200) scripts/gpu_run.sh sanitize > $O/run_san.log 2>&1
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED|==" $O/run_san.log | tail -20
call_finish
