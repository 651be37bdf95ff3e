#!/usr/bin/env bash
# Fifteenth session, device call 10, one H200, ~4.5 minutes. Build `fix` (d541f5d +
# ceiling-child; the library is 9889853's). RELIABILITY.md "Open": 85332b8's decode attention
# (a CTA per query head at small batches) had not run under the sanitizers or the soak.
#   1. compute-sanitizer memcheck / racecheck / synccheck on every DecodeAttention test.
#   2. The soak (Overlap.Soak) for 60 s, llama3.2-1b batch 8 (its attention per query head).
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
log "sanitizers: DecodeAttention.*"
BIN=$X/fix OUT=$O/san SANITIZE_FILTER='DecodeAttention.*' SANITIZE_LIMIT=60 \
  timeout $(left 200) scripts/gpu_run.sh sanitize > $O/san.log 2>&1
tail -n 14 $O/san.log | tee -a $O/run.log
grep -hE "^\[  (PASSED|FAILED) |ERROR SUMMARY|RACECHECK SUMMARY" $O/san/sanitize_*.log | tee -a $O/run.log
log "soak 60 s"
BIN=$X/fix OUT=$O/soak SOAK_SECONDS=60 timeout $(left 285) scripts/gpu_run.sh soak > $O/soak.log 2>&1
tail -n 8 $O/soak.log | tee -a $O/run.log
call_finish
