#!/usr/bin/env bash
# Twenty-fifth session, call 4 on one H200 (~400 s): every GPU test of 1e63d58 but the soak.
. dev/call_lib.sh
unpack_builds
gpu_tests all_tests $X/main 560 '*:-Overlap.Soak'
call_finish
