// RAII owners of CUDA runtime objects for host code that measures or tests on the device, so a
// throw in the middle frees what was created. Each constructor creates its object or throws a
// DeviceError (MEGAOPS_CUDA_CHECK); none is copyable.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/cuda_check.h"

namespace megaops {

struct CudaMemory {
  void* ptr = nullptr;
  explicit CudaMemory(size_t bytes) { MEGAOPS_CUDA_CHECK(cudaMalloc(&ptr, bytes)); }
  ~CudaMemory() { cudaFree(ptr); }
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
};

struct CudaStream {
  cudaStream_t s = nullptr;
  CudaStream() { MEGAOPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~CudaStream() { cudaStreamDestroy(s); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
};

struct CudaEvent {
  cudaEvent_t e = nullptr;
  explicit CudaEvent(unsigned flags = cudaEventDefault) {
    MEGAOPS_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
  }
  ~CudaEvent() { cudaEventDestroy(e); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
};

// A captured graph and its executable (either may still be null).
struct CudaGraph {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  CudaGraph() = default;
  ~CudaGraph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (g) cudaGraphDestroy(g);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
};

// Runs `work` (which enqueues on `stream`) `repeats` times, each between two events, and returns
// the milliseconds of each run, sorted.
template <typename Work>
std::vector<float> timed_runs_ms(cudaStream_t stream, int repeats, Work&& work) {
  CudaEvent start, stop;
  std::vector<float> ms(static_cast<size_t>(repeats));
  for (float& t : ms) {
    MEGAOPS_CUDA_CHECK(cudaEventRecord(start.e, stream));
    work();
    MEGAOPS_CUDA_CHECK(cudaEventRecord(stop.e, stream));
    MEGAOPS_CUDA_CHECK(cudaEventSynchronize(stop.e));
    MEGAOPS_CUDA_CHECK(cudaEventElapsedTime(&t, start.e, stop.e));
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

}  // namespace megaops
