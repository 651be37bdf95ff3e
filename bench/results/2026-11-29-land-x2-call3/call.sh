#!/usr/bin/env bash
# Device call 3 of 2026-11-29 (fourth session), nvidia-h200-x2: the land build with barriers where
# budgets cannot hold (batch 32), wait cap 256, memcheck without API-error reports, and racecheck
# over the tests call 2's racecheck did not reach. Carry [".carry/pack.tar.xz"]; all in $OUT/all.tgz.
set -u
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x && cp .carry/x/land/gpu_run.sh scripts/gpu_run.sh
export NCCL_NVLS_ENABLE=0 BIN=.carry/x/land
O=/tmp/o; mkdir -p $O
( export CUDA_VISIBLE_DEVICES=1
  OUT=$O/s1 SANITIZE_TOOLS=memcheck SANITIZE_LIMIT=120 timeout 130 scripts/gpu_run.sh sanitize > $O/run_s1.log 2>&1
  OUT=$O/s2 SANITIZE_TOOLS=racecheck SANITIZE_FILTER='Overlap.ConsumerFirstIssueOrder:Overlap.TraceRecordsEveryOpOfTheStep:Overlap.RegionsMatchConventional:Overlap.InputErrors:TensorParallelExecutor.OneRankIsTheSingleGpuPath:TensorParallelExecutor.RejectsBadOptions:TensorParallelExecutor.TwoRanksMatchOneGpu:TileSemaphore.WrapSafeCountComparison:TileSemaphore.RandomDelayIsBoundedAndVaries:TileSemaphore.WatchdogTimeoutFromEnvironment:TileSemaphore.WaitSleepCapFromEnvironment:TileSemaphore.WatchdogRecordStartsClear:Presets/ConventionalVsOracle.LogitsMatchPerStepForABatch/0:Presets/ConventionalVsOracle.LogitsMatchPerStepForABatch/1:Presets/OverlapVsConventional.SameTokensAndLogits/tiny_llama3_b1:Presets/OverlapVsConventional.SameTokensAndLogits/tiny_llama3_b3:Presets/OverlapVsConventional.SameTokensAndLogits/tiny_qwen3_b1:Presets/OverlapVsConventional.SameTokensAndLogits/tiny_qwen3_b3:Presets/OverlapVsConventional.SameTokensAndLogits/tiny_llama3_b12:Presets/OverlapVsConventional.SameTokensAndLogits/tiny_qwen3_b12:Presets/OverlapVsConventional.SameTokensAndLogits/tiny_llama3_b12_chunks3:Presets/OverlapVsConventional.SameTokensAndLogits/tiny_llama3_b3_v0:Presets/OverlapVsConventional.SameTokensAndLogits/tiny_qwen3_b3_v0' SANITIZE_LIMIT=$(left 440) timeout $(left 445) scripts/gpu_run.sh sanitize > $O/run_s2.log 2>&1 ) &
san=$!
export CUDA_VISIBLE_DEVICES=0
OUT=$O/c OVERLAP_TEST_LIMIT=220 OVERLAP_BATCHES=1,32 OVERLAP_TEST_FILTER='Presets/Overlap*:FullSize/Overlap*:Overlap.RegionsMatchConventional:Overlap.ConsumerFirstIssueOrder:Overlap.RandomDelays' \
  timeout $(left 400) scripts/gpu_run.sh overlap trace > $O/run_c.log 2>&1
wait $san
cp $O/run_*.log "$OUT/" 2>/dev/null
tar czf "$OUT/all.tgz" -C $O .
echo "call done after $(( $(date +%s) - t0 )) s"
