#!/usr/bin/env bash
# Sixteenth session, second device call (one H200, ~6 minutes). Builds (scripts/pack_variants.sh
# fold foldet): fold = 1fc9ee3 + dev/wip-fold.patch (the chain waits on grids by default, norms
# folded into the bulk streaming matmul after them); foldet = fold + dev/pdl-early-trigger.patch.
#   1. The overlap tests and the fold's kernel tests.
#   2. Rows alternated (conventional + PDL and the chain in each row), batch 1: fold on / off,
#      early trigger; llama3.2-1b also with its gate_up on the bulk kernel (both norms fold).
#   3. The 8B presets; traces of the folded chain.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "overlap tests + fold kernel tests"
MEGAOPS_WATCHDOG_MS=2000 timeout -k 5 200 $X/fold/megaops_gpu_tests \
  --gtest_filter='Overlap.*:OverlapDeathTest.*:Presets/Overlap*:FullSize/Overlap*:MatmulTest.*Fold*:AddRmsNorm*:-Overlap.Soak' \
  --gtest_output=json:$O/tests.json > $O/tests.log 2>&1
echo "tests rc=$?" | tee -a $O/run.log
grep -E "^\[  (PASSED|FAILED) |FAILED|tests ran" $O/tests.log | tail -20 | tee -a $O/run.log
CH="--batch 1 --pdl on --backend both --overlap-streams 1 --overlap-pdl-chain"
for r in 1 2; do
  for m in qwen3-0.6b llama3.2-1b; do
    bench_rows fold_${m}_$r $X/fold 560 --preset $m $CH
    bench_rows nofold_${m}_$r $X/fold 560 --preset $m $CH --overlap-fold-norms off
    bench_rows foldet_${m}_$r $X/foldet 560 --preset $m $CH
  done
  MEGAOPS_MATMUL_STREAM_SHAPES=16384x2048 bench_rows gu_fold_1b_$r $X/fold 560 --preset llama3.2-1b $CH
  MEGAOPS_MATMUL_STREAM_SHAPES=16384x2048 bench_rows gu_foldet_1b_$r $X/foldet 560 --preset llama3.2-1b $CH
done
for m in llama3.1-8b qwen3-8b; do
  bench_rows fold_$m $X/fold 560 --preset $m $CH
done
for m in qwen3-0.6b llama3.2-1b; do
  log "trace $m folded chain"
  timeout $(left 570) $X/fold/megaops trace --preset $m --batch 1 --streams 1 --pdl-chain \
    --out $O/trace_fold_$m.json > $O/trace_fold_$m.log 2>&1
  grep "step span" $O/trace_fold_$m.log | tee -a $O/run.log
done
call_finish
