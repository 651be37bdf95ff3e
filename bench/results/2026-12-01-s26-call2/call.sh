#!/usr/bin/env bash
# Twenty-sixth session, call 2 on one H200: Overlap.Soak on main (07f7d89) for 570 s, as long as
# one call allows (llama3.2-1b batch 1, PDL chain against conventional + PDL).
. dev/call_lib.sh
unpack_builds
log soak
MEGAOPS_SOAK_SECONDS=570 MEGAOPS_SOAK_PDL_CHAIN=1 MEGAOPS_SOAK_BATCH=1 \
  gpu_tests soak $X/main 588 Overlap.Soak
call_finish
