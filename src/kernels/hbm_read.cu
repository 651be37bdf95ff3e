// The HBM read ceiling (see hbm_read.cuh). The kernel is deliberately the simplest thing that
// saturates DRAM: a grid of full SMs, each thread with READ_UNROLL independent 16-byte loads in
// flight, coalesced across the warp, no shared memory and no writes except an impossible-to-hit
// sink that keeps the compiler from dropping the loads (and, in a chain of reads, one word).
#include <algorithm>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_owners.h"
#include "core/error.h"
#include "kernels/hbm_read.cuh"

namespace megaops {

namespace {

constexpr int READ_THREADS = 512;
constexpr int READ_BLOCKS_PER_SM = 4;  // 2048 threads: a full SM
constexpr int READ_UNROLL = 4;         // 64 B in flight per thread, 128 KB per SM

__device__ __forceinline__ uint4 load_stream16(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__global__ void __launch_bounds__(READ_THREADS)
    hbm_read_kernel(const uint4* data, size_t n_vec, unsigned* sink, const unsigned* prev,
                    unsigned* out) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + (READ_UNROLL - 1) * stride < n_vec; i += READ_UNROLL * stride) {
    uint4 v[READ_UNROLL];
#pragma unroll
    for (int u = 0; u < READ_UNROLL; ++u) v[u] = load_stream16(data + i + u * stride);
#pragma unroll
    for (int u = 0; u < READ_UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n_vec; i += stride) {
    const uint4 v = load_stream16(data + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  // A chained read: its own bytes above (under PDL they stream while the read before it still
  // runs: the PDL contract of kernels/common.cuh), the word of the read before it after the wait.
  if (out != nullptr) {
    pdl_wait();
    pdl_launch_dependents();
    if (blockIdx.x == 0 && threadIdx.x == 0) *out = (prev != nullptr ? *prev : 0u) + 1u;
  }
  // The buffer is filled with one repeated byte, so this never holds; the compiler cannot know.
  if (acc == 0x9e3779b9u) *sink = acc;
}

}  // namespace

cudaError_t hbm_read(const HbmReadParams& p) {
  if (p.data == nullptr || p.sink == nullptr || p.bytes < 16 || p.bytes % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.data) % 16 != 0)
    return cudaErrorInvalidValue;
  int sm_count = 0;
  if (const cudaError_t err = current_device_attribute(cudaDevAttrMultiProcessorCount, &sm_count);
      err != cudaSuccess)
    return err;
  const size_t n_vec = p.bytes / 16;
  // Never more threads than 16-byte words: small buffers get a small grid.
  const size_t max_blocks = (n_vec + READ_THREADS - 1) / READ_THREADS;
  const unsigned grid =
      static_cast<unsigned>(std::min<size_t>(max_blocks, size_t(sm_count) * READ_BLOCKS_PER_SM));
  return launch_kernel(hbm_read_kernel, dim3(grid), dim3(READ_THREADS), 0, p.launch,
                       static_cast<const uint4*>(p.data), n_vec, p.sink, p.prev, p.out);
}

double measure_hbm_read_gbps(size_t bytes, int iterations) {
  bytes = bytes / 16 * 16;
  if (bytes < 16 || iterations < 1)
    throw InputError("measure_hbm_read_gbps: need bytes >= 16 and iterations >= 1, got " +
                     std::to_string(bytes) + " and " + std::to_string(iterations));
  CudaMemory buf(bytes), sink(sizeof(unsigned));
  // Touch every page before timing, and give the data a value the sink test never matches.
  MEGAOPS_CUDA_CHECK(cudaMemset(buf.ptr, 0x5a, bytes));
  CudaStream stream;

  HbmReadParams p;
  p.data = buf.ptr;
  p.bytes = bytes;
  p.sink = static_cast<unsigned*>(sink.ptr);
  p.launch.stream = stream.s;
  constexpr int WARMUP = 2;
  for (int i = 0; i < WARMUP; ++i) MEGAOPS_CUDA_CHECK(hbm_read(p));

  const std::vector<float> ms =
      timed_runs_ms(stream.s, iterations, [&] { MEGAOPS_CUDA_CHECK(hbm_read(p)); });
  const double median_ms =
      iterations % 2 ? ms[iterations / 2] : 0.5 * (ms[iterations / 2 - 1] + ms[iterations / 2]);
  return static_cast<double>(bytes) / (median_ms * 1e-3) / 1e9;
}

}  // namespace megaops
