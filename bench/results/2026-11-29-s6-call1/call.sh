#!/usr/bin/env bash
# Sixth session, device call 1, on ONE H200 (only `nvidia-h200` is lent): next-call1.sh without the
# TP half (needs two GPUs), main and sync one after the other instead of side by side.
# Carry .carry/pack.tar.xz (main, sync, wide of 69b74d4). Everything in $OUT/all.tgz.
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
plan=dev/plans/llama3.2-1b_b1_embedding_overlap.json
# sync: the overlap tests (bit-equal, stress, replays, watchdog, regions) and its overlap bench.
OUT=$O/sync OVERLAP_TEST_LIMIT=200 OVERLAP_BATCHES=1,32 BIN=.carry/x/sync \
  timeout $(left 300) scripts/gpu_run.sh overlap > $O/run_sync.log 2>&1
# main: the same bench, no tests (validated in the fifth session).
OUT=$O/main OVERLAP_TEST_FILTER=NoSuch.Test OVERLAP_BATCHES=1,32 BIN=.carry/x/main \
  timeout $(left 400) scripts/gpu_run.sh overlap > $O/run_main.log 2>&1
for b in main sync; do
  timeout $(left 430) .carry/x/$b/megaops bench --preset llama3.2-1b --batch 1 --prompt 32 \
    --gen 128 --repeats 3 --pdl off --plan $plan --json $O/plan_emb_$b.json >> $O/run_$b.log 2>&1
done
timeout $(left 460) .carry/x/main/megaops profile --preset llama3.2-1b --batch 1 \
  --json $O/profile_llama3.2-1b_b1.json >> $O/run_main.log 2>&1
OUT=$O/ncu BIN=.carry/x/main timeout $(left 585) scripts/gpu_run.sh ncu_matmul > $O/run_ncu.log 2>&1
cp $O/run_*.log "$OUT/" 2>/dev/null
call_finish
