// See boundary_bench.cuh.
#include <algorithm>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_owners.h"
#include "core/error.h"
#include "kernels/boundary_bench.cuh"
#include "kernels/hbm_read.cuh"

namespace megaops {

namespace {

// Records `kernels` chained reads of `bytes` each (or one read of all when `flat`) into a graph.
void capture(CudaGraph& graph, cudaStream_t stream, const char* data, size_t bytes, int kernels,
             bool flat, bool pdl, unsigned* words, unsigned* sink) {
  MEGAOPS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaError_t err = cudaSuccess;
  const int launches = flat ? 1 : kernels;
  for (int k = 0; k < launches && err == cudaSuccess; ++k) {
    HbmReadParams p;
    p.data = data + (flat ? 0 : static_cast<size_t>(k) * bytes);
    p.bytes = flat ? bytes * kernels : bytes;
    p.prev = k == 0 ? nullptr : words + k - 1;
    p.out = words + k;
    p.sink = sink;
    p.launch = LaunchOptions{stream, pdl && k > 0};
    err = hbm_read(p);
  }
  MEGAOPS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph.g));
  MEGAOPS_CUDA_CHECK(err);
  MEGAOPS_CUDA_CHECK(cudaGraphInstantiate(&graph.exec, graph.g, 0));
}

}  // namespace

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
