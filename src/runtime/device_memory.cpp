// See device_memory.h.
#include "runtime/device_memory.h"

#include <cuda_runtime.h>

#include "core/error.h"

namespace megaops {

DeviceMemory::~DeviceMemory() {
  for (void* p : ptrs_) cudaFree(p);
}

void* DeviceMemory::alloc(const std::string& what, size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not poisoned
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw DeviceError("out of device memory allocating " + what + ": " + std::to_string(bytes) +
                      " bytes requested, " + std::to_string(free_b) + " of " +
                      std::to_string(total_b) + " bytes free (" + cudaGetErrorString(err) + ")");
  }
  ptrs_.push_back(p);
  total_ += bytes;
  return p;
}

}  // namespace megaops
