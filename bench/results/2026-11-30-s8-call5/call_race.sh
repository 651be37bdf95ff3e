#!/usr/bin/env bash
# Eighth session, device call 8 (2026-11-30): racecheck over the same three tests as call.sh, as
# it ran (one command line, here as a script).
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
OUT=$O/race BIN=.carry/x/land SANITIZE_TOOLS=racecheck SANITIZE_LIMIT=110 \
  SANITIZE_FILTER='Conventional.EightB*:MatmulTest.Stream*:MatmulTest.PdlChain*' \
  timeout 130 scripts/gpu_run.sh sanitize > $O/run_race.log 2>&1
tail -8 $O/run_race.log
call_finish
