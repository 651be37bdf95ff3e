#!/usr/bin/env bash
# Fifteenth session, device call 6, one H200, ~2 minutes. Build `pre` as call 5. Call 5: with no
# HBM ceiling measured in the process, the 8B's PDL-off step is 4.592-4.602 ms, with it (before
# or after the executor is built) 4.736-4.745. Is it the ceiling kernel's first load (lazy module
# loading places later kernels' code differently) or its run? CUDA_MODULE_LOADING=EAGER loads
# every kernel at start; a 1 MB ceiling loads the kernel and runs it briefly. And the small models.
. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee -a $O/run.log
B=$X/pre
r8() { bench_rows "$1" $B 560 --preset llama3.1-8b --batch 1 --pdl off; }
r8 main
CUDA_MODULE_LOADING=EAGER r8 eager_main
CUDA_MODULE_LOADING=EAGER MEGAOPS_BENCH_CEILING=skip r8 eager_skip
MEGAOPS_BENCH_CEILING=1 r8 mb1
MEGAOPS_BENCH_CEILING=skip r8 skip
for p in llama3.2-1b qwen3-0.6b; do
  bench_rows main_$p $B 560 --preset $p --batch 1,8 --pdl both
  MEGAOPS_BENCH_CEILING=skip bench_rows skip_$p $B 560 --preset $p --batch 1,8 --pdl both
done
call_finish
