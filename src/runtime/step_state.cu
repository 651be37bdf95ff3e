// See step_state.cuh.
#include <algorithm>
#include <cstdint>

#include "runtime/step_state.cuh"

namespace megaops {

namespace {

__global__ void step_advance_kernel(int32_t* positions, int32_t* ctx_lens, uint32_t* step, int b,
                                    uint32_t* overlap_step, uint32_t* counters, int counters_n,
                                    const int32_t* tokens, int32_t* host_tokens, int tokens_ld,
                                    TileSync sync) {
  // Every thread reads the overlap step before thread 0 may advance it: the barrier orders those
  // reads before the increment below (tile_sync_wait has one when it waits; add one otherwise).
  const uint32_t ostep = tile_sync_step(sync);
  tile_sync_wait(sync, ostep);  // the sampler (our predecessor) has read `step`
  const int i = threadIdx.x;
  if (host_tokens != nullptr) {
    // Every thread reads positions[0] before thread 0 advances it (the barrier below); the
    // sampler, which wrote the tokens, completed before this kernel.
    const int half = positions[0] & 1;
    if (i < b) host_tokens[half * tokens_ld + i] = tokens[i];
  }
  if (sync.step != nullptr || host_tokens != nullptr) __syncthreads();
  // Every kernel of the step has completed (the join): no signal can race these stores.
  for (int k = i; k < counters_n; k += blockDim.x)
    counters[k] = tile_target(ostep, TILE_SYNC_STEP_SUM);
  if (i < b) {
    const int32_t next = positions[i] + 1;
    positions[i] = next;
    ctx_lens[i] = next + 1;
  }
  if (i == 0) {
    *step += 1;
    if (overlap_step != nullptr) *overlap_step += 1;
  }
  pdl_launch_dependents();
  tile_sync_signal(sync, ostep);
}

constexpr int COPY_THREADS = 256;
constexpr int COPY_MAX_CTAS = 64;

// 16 bytes a thread over the aligned part, then the last < 4 words. Completes before its PDL
// dependent passes its wait (no early trigger): the copy is what the step reads.
__global__ void __launch_bounds__(COPY_THREADS)
    copy_step_inputs_kernel(const uint4* src, uint4* dst, size_t n16, int tail_words) {
  const size_t stride = static_cast<size_t>(gridDim.x) * COPY_THREADS;
  for (size_t i = static_cast<size_t>(blockIdx.x) * COPY_THREADS + threadIdx.x; i < n16;
       i += stride)
    dst[i] = src[i];
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < tail_words)
    reinterpret_cast<uint32_t*>(dst + n16)[threadIdx.x] =
        reinterpret_cast<const uint32_t*>(src + n16)[threadIdx.x];
}

}  // namespace

cudaError_t launch_copy_step_inputs(const CopyStepInputsParams& p) {
  if (p.bytes % 4 != 0 || (p.bytes > 0 && (!p.src || !p.dst)) ||
      reinterpret_cast<uintptr_t>(p.src) % 16 != 0 || reinterpret_cast<uintptr_t>(p.dst) % 16 != 0)
    return cudaErrorInvalidValue;
  if (p.bytes == 0) return cudaSuccess;
  const size_t n16 = p.bytes / 16;
  const int tail = static_cast<int>((p.bytes % 16) / 4);
  const size_t ctas = std::min<size_t>(COPY_MAX_CTAS, std::max<size_t>(1, (n16 + 255) / 256));
  return launch_kernel(copy_step_inputs_kernel, dim3(static_cast<unsigned>(ctas)),
                       dim3(COPY_THREADS), 0, p.launch, static_cast<const uint4*>(p.src),
                       static_cast<uint4*>(p.dst), n16, tail);
}

cudaError_t launch_step_advance(const StepAdvanceParams& p) {
  if (!p.positions || !p.ctx_lens || !p.step || p.b < 1 || p.b > 1024 || p.counters_n < 0 ||
      (p.counters_n > 0 && (p.counters == nullptr || p.overlap_step == nullptr)) ||
      (p.host_tokens != nullptr && (p.tokens == nullptr || p.tokens_ld < p.b)))
    return cudaErrorInvalidValue;
  return launch_kernel(step_advance_kernel, dim3(1), dim3(((p.b + 31) / 32) * 32), 0, p.launch,
                       p.positions, p.ctx_lens, p.step, p.b, p.overlap_step, p.counters,
                       p.counters_n, p.tokens, p.host_tokens, p.tokens_ld, p.sync);
}

cudaError_t preload_step_state_kernels() {
  const cudaError_t err = preload_kernel(step_advance_kernel);
  return err != cudaSuccess ? err : preload_kernel(copy_step_inputs_kernel);
}

}  // namespace megaops
