#!/usr/bin/env bash
# Twenty-fourth session, call 5 on one H200 (~470 s): the table of b4c4e83 (build `final`; four
# presets, batch 1 / 8 / 32, conventional PDL off / on and the PDL chain, the HBM ceiling in the
# same run), then the GPU suite without the soak, as long as the session's device time allows.
. dev/call_lib.sh
unpack_builds
table_rows $X/final 110
gpu_tests all_tests $X/final 365 '*:-Overlap.Soak'
call_finish
