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
  for v in main:main:layers pdggraph:pdg:graph; do
    name=${v%%:*}; rest=${v#*:}; b=${rest%%:*}; f=${rest#*:}
    extra=""; [ $b = pdg ] && extra="--prefill $f"
    for p in llama3.2-1b qwen3-0.6b llama3.1-8b; do
      log "bench $name $p r$r"
      MEGAOPS_GIT_SHA=$(cat $X/$b/GIT_SHA) timeout $(left 580) $X/$b/megaops bench --preset $p \
        --batch 1,8 --prompt 32 --gen 128 --repeats 3 --pdl both --backend both $extra \
        --json $O/bench_${name}_${p}_r$r.json > $O/bench_${name}_${p}_r$r.log 2>&1
      grep -E "^(conventional|overlap) |rror" $O/bench_${name}_${p}_r$r.log | tee -a $O/run.log
    done
  done
done
for r in 1 2; do
  for p in llama3.2-1b:16384x2048 qwen3-0.6b:6144x1024; do
    pre=${p%%:*}; shape=${p#*:}
    for v in default stream; do
      log "gate_up $v $pre r$r"
      envs=""; [ $v = stream ] && envs="MEGAOPS_MATMUL_STREAM_SHAPES=$shape"
      env $envs MEGAOPS_GIT_SHA=$(cat $X/main/GIT_SHA) timeout $(left 590) $X/main/megaops bench \
        --preset $pre --batch 1 --prompt 32 --gen 128 --repeats 3 --pdl both --backend both \
        --json $O/gateup_${v}_${pre}_r$r.json > $O/gateup_${v}_${pre}_r$r.log 2>&1
      grep -E "^(conventional|overlap) |rror" $O/gateup_${v}_${pre}_r$r.log | tee -a $O/run.log
    done
  done
done
for r in 1 2; do
  for p in llama3.2-1b qwen3-0.6b; do
    for w in 1 2 3; do
      log "overlap streams $w $p r$r"
      MEGAOPS_GIT_SHA=$(cat $X/main/GIT_SHA) timeout $(left 595) $X/main/megaops bench \
        --preset $p --batch 1 --prompt 32 --gen 128 --repeats 3 --backend overlap \
        --overlap-streams $w --json $O/streams${w}_${p}_r$r.json > $O/streams${w}_${p}_r$r.log 2>&1
      grep -E "^overlap |rror" $O/streams${w}_${p}_r$r.log | tee -a $O/run.log
    done
  done
done
call_finish
