#!/usr/bin/env bash
# Fourteenth session, device call 4, one H200, ~4 minutes. Builds: `steps` = 86d93a8 +
# dev/bench-step-times.patch; `attnh` = steps + dev/attn-rounds.patch as of this call (decode
# attention: a round's scores and exponentials independent, contexts up to 256 keys unsplit, the
# context length and slot read before the wait, and one CTA per query head when every query head
# of the batch fits one CTA per SM, with 128-key rounds at head_dim 128).
#   1. The decode attention tests and the overlap tests on `attnh`.
#   2. Conventional PDL off / on, `steps` and `attnh` rows alternated, every step's time.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "attention + overlap tests"
MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 150 $X/attnh/megaops_gpu_tests \
  --gtest_filter='DecodeAttention.*:Overlap.PdlChain*:Overlap.RandomDelays:OverlapDeathTest.*' \
  > $O/tests_attn.log 2>&1
grep -E "^\[  (PASSED|FAILED) |FAILED" $O/tests_attn.log | tail -8 | tee -a $O/run.log
for r in 1 2; do
  for v in steps attnh; do
    bench_rows r${r}_${v}_8b $X/$v 580 --preset llama3.1-8b --batch 1 --pdl both --step-times
    bench_rows r${r}_${v}_1b $X/$v 580 --preset llama3.2-1b --batch 1,8 --pdl both --step-times
    bench_rows r${r}_${v}_06b $X/$v 580 --preset qwen3-0.6b --batch 1 --pdl both --step-times
  done
done
for v in steps attnh; do
  bench_rows q8b_${v} $X/$v 580 --preset qwen3-8b --batch 1 --pdl both
  bench_rows chain_${v}_1b $X/$v 580 --preset llama3.2-1b --batch 1 --backend overlap \
    --overlap-streams 1 --overlap-pdl-chain
done
call_finish
