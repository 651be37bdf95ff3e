#!/usr/bin/env bash
# Twenty-first session, call 6 (one H200): MatmulTest.* and MatmulDispatch* of HEAD (call 5's
# one failure, EnvironmentKnobs' unlisted shape, fixed), then racecheck over the dynamic
# schedule's short test with what is left.
. dev/call_lib.sh
unpack_builds
gpu_tests matmul $X/main 90 'MatmulTest.*:MatmulDispatch*'
racecheck_tests $X/main 'MatmulTest.StreamDynamicScheduleFolds' $(left 300)
call_finish
