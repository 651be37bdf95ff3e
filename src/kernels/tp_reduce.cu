// See tp_reduce.cuh.
#include "kernels/tp_reduce.cuh"

namespace megaops {

namespace {

constexpr int REDUCE_THREADS = 256;
constexpr int REDUCE_MAX_CTAS = 64;

__global__ void __launch_bounds__(REDUCE_THREADS) tp_peer_reduce_kernel(PeerReduceParams p) {
  // The partial this rank publishes was written by the kernels before this one on the stream.
  pdl_wait();
  const uint32_t step = ld_relaxed_gpu(p.step);
  if (threadIdx.x == 0) {
    if (blockIdx.x == 0) {
      // Cumulative over what this thread observed: the earlier kernels' writes of the partial,
      // ordered before this kernel by the stream. The fence makes that explicit at sys scope.
      fence_sc_sys();
      red_add_release_sys(p.own_counter, 1);
    }
    // Constant bounds and indices (unrolled): a loop to p.ranks would index the parameter arrays
    // at run time and copy the whole struct to local memory.
#pragma unroll
    for (int r = 0; r < TP_PEER_MAX; ++r)
      if (r < p.ranks)
        tile_wait_sys(p.counters[r], step, WaitSite{p.site, static_cast<uint32_t>(r)}, p.watchdog);
  }
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.count;
       i += stride) {
    float acc = 0.f;
    // ld.global.cg: past this SM's L1, which may hold the slot's value of an earlier step.
#pragma unroll
    for (int r = 0; r < TP_PEER_MAX; ++r)
      if (r < p.ranks) acc += __ldcg(p.parts[r] + i);
    p.out[i] = acc;
  }
}

__global__ void tp_step_advance_kernel(uint32_t* step) {
  pdl_wait();
  if (threadIdx.x == 0) *step += 1;
}

}  // namespace

cudaError_t launch_tp_peer_reduce(const PeerReduceParams& p) {
  if (p.ranks < 1 || p.ranks > TP_PEER_MAX || p.count < 1 || p.out == nullptr ||
      p.own_counter == nullptr || p.step == nullptr)
    return cudaErrorInvalidValue;
  for (int r = 0; r < p.ranks; ++r)
    if (p.parts[r] == nullptr || p.counters[r] == nullptr) return cudaErrorInvalidValue;
  const int64_t want = (p.count + REDUCE_THREADS - 1) / REDUCE_THREADS;
  const unsigned ctas = static_cast<unsigned>(want < REDUCE_MAX_CTAS ? want : REDUCE_MAX_CTAS);
  return launch_kernel(tp_peer_reduce_kernel, dim3(ctas), dim3(REDUCE_THREADS), 0, p.launch, p);
}

cudaError_t launch_tp_step_advance(uint32_t* step, const LaunchOptions& launch) {
  if (step == nullptr) return cudaErrorInvalidValue;
  return launch_kernel(tp_step_advance_kernel, dim3(1), dim3(32), 0, launch, step);
}

cudaError_t preload_tp_reduce_kernels() {
  if (const cudaError_t err = preload_kernel(tp_peer_reduce_kernel); err != cudaSuccess) return err;
  return preload_kernel(tp_step_advance_kernel);
}

}  // namespace megaops
