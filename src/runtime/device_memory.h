// Device allocations that say what they are for: an allocation failure reports the buffer's name,
// the bytes asked for and the bytes free, instead of a bare "out of memory".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace megaops {

class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // cudaMalloc `bytes` (at least 1); throws DeviceError naming `what` on failure.
  void* alloc(const std::string& what, size_t bytes);

  template <typename T>
  T* alloc_array(const std::string& what, size_t count) {
    return static_cast<T*>(alloc(what, count * sizeof(T)));
  }

  size_t bytes_allocated() const { return total_; }

 private:
  std::vector<void*> ptrs_;
  size_t total_ = 0;
};

}  // namespace megaops
