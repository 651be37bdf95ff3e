#!/usr/bin/env bash
# Fourteenth session, device call 3, one H200, ~6 minutes. Builds: `steps` = 86d93a8 +
# dev/bench-step-times.patch, `attn` = steps + dev/attn-rounds.patch (decode attention: a round's
# scores and exponentials independent, 128 keys a round where the grid fits one CTA per SM,
# contexts up to 256 keys unsplit, ctx / slot read before the wait).
#   1. The decode attention kernel tests on `attn`.
#   2. Conventional PDL off / on, the four presets, `steps` and `attn` rows alternated (batch 1
#      twice; batch 8 / 32 once), every step's time; the PDL chain on the small models.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "attention tests"
timeout -k 5 120 $X/attn/megaops_gpu_tests --gtest_filter='DecodeAttention.*:PrefillAttention.*' \
  > $O/tests_attn.log 2>&1
grep -E "^\[  (PASSED|FAILED) |FAILED" $O/tests_attn.log | tail -8 | tee -a $O/run.log
for v in steps attn; do
  bench_rows r1_${v}_1b $X/$v 580 --preset llama3.2-1b --batch 1,8,32 --pdl both --step-times
  bench_rows r1_${v}_06b $X/$v 580 --preset qwen3-0.6b --batch 1,8 --pdl both --step-times
  bench_rows r1_${v}_8b $X/$v 580 --preset llama3.1-8b --batch 1 --pdl both --step-times
done
for v in attn steps; do
  bench_rows r2_${v}_1b $X/$v 580 --preset llama3.2-1b --batch 1 --pdl both --step-times
  bench_rows r2_${v}_06b $X/$v 580 --preset qwen3-0.6b --batch 1 --pdl both --step-times
  bench_rows r2_${v}_8b $X/$v 580 --preset llama3.1-8b --batch 1 --pdl both --step-times
done
for v in steps attn; do
  bench_rows q8b_${v} $X/$v 580 --preset qwen3-8b --batch 1 --pdl both
done
for v in steps attn; do
  for p in llama3.2-1b qwen3-0.6b; do
    bench_rows chain_${v}_${p} $X/$v 580 --preset $p --batch 1 --backend overlap \
      --overlap-streams 1 --overlap-pdl-chain
  done
done
call_finish
