#!/usr/bin/env bash
# Twenty-fifth session, call 3 on one H200 (~200 s): the table of 1e63d58 (decode_steps, the stream
# loop by default; step_advance writing the tokens into mapped host memory), the same batch-1 rows
# with the host waiting for every step (--decode-loop sync). The GPU tests: call 4.
. dev/call_lib.sh
unpack_builds
table_rows $X/main 200
for m in llama3.2-1b qwen3-0.6b llama3.1-8b qwen3-8b; do
  bench_rows sync_$m $X/main 260 --preset $m --batch 1 --pdl both --backend both \
    --overlap-streams 1 --overlap-pdl-chain --decode-loop sync
done

call_finish
