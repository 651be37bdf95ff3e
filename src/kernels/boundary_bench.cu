// See boundary_bench.cuh. The read is hbm_read's (16-byte streaming loads, a grid of full SMs);
// the chain adds the ordering word, read after the wait, and the trigger.
#include <algorithm>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_owners.h"
#include "core/error.h"
#include "kernels/boundary_bench.cuh"

namespace megaops {

namespace {

constexpr int CHAIN_THREADS = 512;
constexpr int CHAIN_BLOCKS_PER_SM = 4;

__device__ __forceinline__ uint4 load_slice16(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__global__ void __launch_bounds__(CHAIN_THREADS)
    boundary_chain_kernel(const uint4* data, size_t n_vec, const unsigned* prev, unsigned* out,
                          unsigned* sink) {
  // The slice first: under PDL it streams while the predecessor still runs (the PDL contract of
  // kernels/common.cuh: own inputs before the wait, the predecessor's output after it).
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec;
       i += stride) {
    const uint4 v = load_slice16(data + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  pdl_wait();
  pdl_launch_dependents();
  if (blockIdx.x == 0 && threadIdx.x == 0) *out = (prev != nullptr ? *prev : 0u) + 1u;
  // The data is one repeated byte, so this never holds; the compiler cannot know.
  if (acc == 0x9e3779b9u) *sink = acc;
}

// Records `kernels` chained reads of `bytes` each (or one read of all when `flat`) into a graph.
void capture(CudaGraph& graph, cudaStream_t stream, const char* data, size_t bytes, int kernels,
             bool flat, bool pdl, unsigned* words, unsigned* sink) {
  MEGAOPS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaError_t err = cudaSuccess;
  const int launches = flat ? 1 : kernels;
  for (int k = 0; k < launches && err == cudaSuccess; ++k) {
    BoundaryChainParams p;
    p.data = data + (flat ? 0 : static_cast<size_t>(k) * bytes);
    p.bytes = flat ? bytes * kernels : bytes;
    p.prev = k == 0 ? nullptr : words + k - 1;
    p.out = words + k;
    p.sink = sink;
    p.launch = LaunchOptions{stream, pdl && k > 0};
    err = boundary_chain_read(p);
  }
  MEGAOPS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph.g));
  MEGAOPS_CUDA_CHECK(err);
  MEGAOPS_CUDA_CHECK(cudaGraphInstantiate(&graph.exec, graph.g, 0));
}

}  // namespace

cudaError_t boundary_chain_read(const BoundaryChainParams& p) {
  if (p.data == nullptr || p.out == nullptr || p.sink == nullptr || p.bytes < 16 ||
      p.bytes % 16 != 0 || reinterpret_cast<uintptr_t>(p.data) % 16 != 0)
    return cudaErrorInvalidValue;
  int sm_count = 0;
  if (const cudaError_t err = current_device_attribute(cudaDevAttrMultiProcessorCount, &sm_count);
      err != cudaSuccess)
    return err;
  const size_t n_vec = p.bytes / 16;
  const size_t max_blocks = (n_vec + CHAIN_THREADS - 1) / CHAIN_THREADS;
  const unsigned grid =
      static_cast<unsigned>(std::min<size_t>(max_blocks, size_t(sm_count) * CHAIN_BLOCKS_PER_SM));
  return launch_kernel(boundary_chain_kernel, dim3(grid), dim3(CHAIN_THREADS), 0, p.launch,
                       static_cast<const uint4*>(p.data), n_vec, p.prev, p.out, p.sink);
}

BoundaryBenchResult measure_kernel_boundaries(size_t bytes_per_kernel, int kernels,
                                              int iterations) {
  bytes_per_kernel = bytes_per_kernel / 16 * 16;
  if (kernels < 2 || bytes_per_kernel < 16 || iterations < 1)
    throw InputError(
        "measure_kernel_boundaries: need kernels >= 2, bytes >= 16 and iterations >= "
        "1, got " +
        std::to_string(kernels) + ", " + std::to_string(bytes_per_kernel) + " and " +
        std::to_string(iterations));
  const size_t total = bytes_per_kernel * static_cast<size_t>(kernels);
  CudaMemory buf(total), words(sizeof(unsigned) * kernels), sink(sizeof(unsigned));
  MEGAOPS_CUDA_CHECK(cudaMemset(buf.ptr, 0x5a, total));
  CudaStream stream;
  BoundaryBenchResult r;
  r.kernels = kernels;
  r.bytes_per_kernel = bytes_per_kernel;
  r.iterations = iterations;
  auto* w = static_cast<unsigned*>(words.ptr);
  auto time_graph = [&](bool flat, bool pdl, std::vector<unsigned>* words_out) {
    CudaGraph graph;
    capture(graph, stream.s, static_cast<const char*>(buf.ptr), bytes_per_kernel, kernels, flat,
            pdl, w, static_cast<unsigned*>(sink.ptr));
    MEGAOPS_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream.s));  // warm-up
    const std::vector<float> ms = timed_runs_ms(
        stream.s, iterations, [&] { MEGAOPS_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream.s)); });
    if (words_out) {
      // Poisoned, then one more replay: every word must be rewritten in order.
      MEGAOPS_CUDA_CHECK(cudaMemsetAsync(w, 0xff, sizeof(unsigned) * kernels, stream.s));
      MEGAOPS_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream.s));
      words_out->resize(kernels);
      MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(words_out->data(), w, sizeof(unsigned) * kernels,
                                         cudaMemcpyDeviceToHost, stream.s));
      MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    }
    const size_t n = ms.size();
    return 1e3 * (n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]));
  };
  r.flat_us = time_graph(true, false, nullptr);
  r.plain_us = time_graph(false, false, &r.plain_words);
  r.pdl_us = time_graph(false, true, &r.pdl_words);
  return r;
}

}  // namespace megaops
