// See tile_gate.cuh.
#include "kernels/tile_gate.cuh"

namespace megaops {

namespace {

constexpr int GATE_THREADS = 32;

__global__ void __launch_bounds__(GATE_THREADS) tile_gate_kernel(TileSync sync) {
  const uint32_t step = tile_sync_step(sync);
  tile_sync_wait(sync, step);
  tile_sync_trace(sync);
}

__global__ void __launch_bounds__(GATE_THREADS) tile_signal_kernel(TileSync sync, uint32_t amount) {
  const uint32_t step = tile_sync_step(sync);
  const uint64_t site =
      (static_cast<uint64_t>(sync.op_id) << 40) ^ (static_cast<uint64_t>(step) << 20) ^ amount;
  random_delay(sync.delay, site);
  maybe_delay(sync.delay.seed, site);
  tile_signal_cta(sync.signal_counter, amount);
}

}  // namespace

cudaError_t launch_tile_gate(const TileSync& sync, cudaStream_t stream) {
  if (sync.step == nullptr || sync.wait_counter[0] == nullptr) return cudaErrorInvalidValue;
  return launch_kernel(tile_gate_kernel, dim3(1), dim3(GATE_THREADS), 0,
                       LaunchOptions{stream, false}, sync);
}

cudaError_t launch_tile_signal(const TileSync& sync, uint32_t amount, cudaStream_t stream) {
  if (sync.step == nullptr || sync.signal_counter == nullptr || amount == 0)
    return cudaErrorInvalidValue;
  TileSync s = sync;
  s.trace = TraceParams{};  // the gate records the op
  return launch_kernel(tile_signal_kernel, dim3(1), dim3(GATE_THREADS), 0,
                       LaunchOptions{stream, false}, s, amount);
}

cudaError_t tile_gate_footprint(KernelFootprint* out) {
  return kernel_footprint(tile_gate_kernel, 1, GATE_THREADS, 0, out);
}

cudaError_t preload_tile_gate_kernels() {
  if (const cudaError_t err = preload_kernel(tile_gate_kernel); err != cudaSuccess) return err;
  return preload_kernel(tile_signal_kernel);
}

}  // namespace megaops
