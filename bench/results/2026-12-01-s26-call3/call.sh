#!/usr/bin/env bash
# Twenty-sixth session, call 3 on one H200 (~450 s): every GPU test of 07f7d89 (the commit the
# table of call 1 ran) but the soak (call 2).
. dev/call_lib.sh
unpack_builds
gpu_tests all_tests $X/main 540 '*:-Overlap.Soak'
call_finish
