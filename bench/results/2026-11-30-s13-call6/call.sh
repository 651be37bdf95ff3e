#!/usr/bin/env bash
# Thirteenth session, device call 6, one H200, ~3 minutes: build `chunk` = 4b2ffe3 +
# dev/overlap-chunk-waits.patch (scripts/build_variant.sh chunk dev/overlap-chunk-waits.patch;
# scripts/pack_variants.sh chunk). Everything in $OUT/all.tgz.
#   1. The chain's tests with the new Overlap.PdlChainChunkWaitsMatchConventional.
#   2. The PDL chain with and without K-chunk waits (down per 1,024-column chunk of SiLU·mul),
#      batch 1, llama3.2-1b and qwen3-0.6b, rows alternated, two rounds; conventional + PDL beside.
#   3. One traced step of the chain with chunk waits (llama3.2-1b, batch 1) and its report.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "tests"
TEST_FILTER='Overlap.PdlChain*:OverlapDeathTest.*:Overlap.RandomDelays:Presets/OverlapVsConventional.*' \
  MEGAOPS_WATCHDOG_MS=2000 OUT=$O/tests BIN=$X/chunk timeout -k 5 200 scripts/gpu_run.sh tests \
  > $O/tests.log 2>&1
tail -5 $O/tests.log | tee -a $O/run.log
for r in 1 2; do
  for p in llama3.2-1b qwen3-0.6b; do
    bench_rows conv_${p}_r$r $X/chunk 400 --preset $p --batch 1 --pdl on
    bench_rows chain_${p}_r$r $X/chunk 400 --preset $p --batch 1 --backend overlap \
      --overlap-streams 1 --overlap-pdl-chain
    bench_rows chunk_${p}_r$r $X/chunk 400 --preset $p --batch 1 --backend overlap \
      --overlap-streams 1 --overlap-pdl-chain --overlap-chunk-waits
  done
done
log "trace"
mkdir -p $O/trace
timeout -k 5 60 $X/chunk/megaops trace --preset llama3.2-1b --batch 1 --streams 1 --pdl-chain \
  --chunk-waits --out $O/trace/trace_chunk_llama3.2-1b.json > $O/trace/trace.log 2>&1
python3 scripts/trace_report.py $O/trace/trace_chunk_llama3.2-1b.json 2>&1 | tail -14 | tee -a $O/run.log
call_finish
