#!/usr/bin/env bash
# The next session's first device call (dev/README "Next GPU session" item 1), one H200, ~9 minutes.
# Carry .carry/pack.tar.xz with two builds:
#   scripts/build_variant.sh main
#   scripts/build_variant.sh pdg dev/prefill-decode-graph.patch
#   scripts/pack_variants.sh main pdg
# Everything in $OUT/all.tgz.
#   1. pdg: the sampler, executor and overlap tests (decode_step now goes through run_step, so the
#      whole decode path is retested), the new ones included.
#   2. pdg: HF logits comparison of llama3.2-1b and qwen3-0.6b with the decode-graph prefill
#      (check-logits --prefill graph): the prefill's logits are step 0 of the 65.
#   3. TTFT and the step, rows alternated twice: main (the layer prefill) and pdg --prefill graph
#      (its decode rows are pdg's decode step: they must equal main's); llama3.2-1b, qwen3-0.6b,
#      llama3.1-8b; batch 1 and 8; conventional PDL off / on and overlap.
#   4. main, issue 3: the small models' gate_up (their last vendor GEMM, with a barrier after it in
#      the overlap step) on the streaming kernel (MEGAOPS_MATMUL_STREAM_SHAPES, no code), batch 1,
#      conventional PDL off / on and overlap, alternated twice with the default dispatch.
#   5. main, issue 3: where the overlap step's ~0.12 ms over the serial step goes (same kernels):
#      the overlap step with 1, 2 and 3 live kernels (--overlap-streams), batch 1, small models.
#      W = 1 is the overlap machinery without concurrency (handoffs, budgets, one shared split).
. dev/call_lib.sh
mkdir -p .carry/x && tar xJf .carry/pack.tar.xz -C .carry/x
X=.carry/x
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
log "pdg tests"
# Through gpu_run.sh: it puts PyTorch's NCCL on the loader path (the TP option test opens a
# one-rank communicator).
TEST_FILTER='Sample.*:ConventionalVsOracle.*:Conventional.*:Overlap.*:Presets/OverlapVsConventional.*:TensorParallelExecutor.RejectsBadOptions' \
  MEGAOPS_WATCHDOG_MS=2000 OUT=$O/tests BIN=$X/pdg timeout 300 scripts/gpu_run.sh tests \
  > $O/tests_pdg.log 2>&1; echo "rc $?" | tee -a $O/run.log
tail -12 $O/tests_pdg.log | tee -a $O/run.log
log "hf with the decode-graph prefill"
HF_CHECK_FLAGS="--prefill graph" OUT=$O/hf BIN=$X/pdg timeout 200 scripts/gpu_run.sh hf \
  > $O/hf_pdg.log 2>&1
echo "rc $?" | tee -a $O/run.log; grep check-logits $O/hf_pdg.log | tee -a $O/run.log
for r in 1 2; do
  for p in llama3.2-1b qwen3-0.6b llama3.1-8b; do
    bench_rows main_${p}_r$r $X/main 560 --preset $p --batch 1,8 --pdl both --backend both
    bench_rows pdggraph_${p}_r$r $X/pdg 560 --preset $p --batch 1,8 --pdl both --backend both \
      --prefill graph
  done
done
for r in 1 2; do
  for p in llama3.2-1b:16384x2048 qwen3-0.6b:6144x1024; do
    pre=${p%%:*}; shape=${p#*:}
    bench_rows gateup_default_${pre}_r$r $X/main 580 --preset $pre --batch 1 --pdl both \
      --backend both
    MEGAOPS_MATMUL_STREAM_SHAPES=$shape bench_rows gateup_stream_${pre}_r$r $X/main 580 \
      --preset $pre --batch 1 --pdl both --backend both
  done
done
for r in 1 2; do
  for p in llama3.2-1b qwen3-0.6b; do
    for w in 1 2 3; do
      bench_rows streams${w}_${p}_r$r $X/main 595 --preset $p --batch 1 --backend overlap \
        --overlap-streams $w
    done
  done
done
call_finish
