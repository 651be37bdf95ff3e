#!/usr/bin/env bash
# Thirteenth session, device call 5, one H200, ~5 minutes: the landing commit's build `land`
# (scripts/build_variant.sh land; scripts/pack_variants.sh land). Everything in $OUT/all.tgz.
#   1. `bench --overlap-pdl-chain` (the switch as it lands) beside the conventional step, batch 1
#      and 8, llama3.2-1b and qwen3-0.6b; and its error without --overlap-streams 1.
#   2. Every GPU test (the chain's, the overlap step's full-size comparisons, the default paths).
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
for p in llama3.2-1b qwen3-0.6b; do
  bench_rows land_${p} $X/land 560 --preset $p --batch 1,8 --pdl both
  bench_rows landchain_${p} $X/land 560 --preset $p --batch 1,8 --backend overlap \
    --overlap-streams 1 --overlap-pdl-chain
done
$X/land/megaops bench --preset tiny-llama3 --backend overlap --overlap-pdl-chain 2>&1 | tee -a $O/run.log
log "all GPU tests"
TEST_FILTER='*' MEGAOPS_WATCHDOG_MS=2000 OUT=$O/tests BIN=$X/land timeout -k 5 $(left 570) \
  scripts/gpu_run.sh tests > $O/tests.log 2>&1
tail -8 $O/tests.log | tee -a $O/run.log
call_finish
