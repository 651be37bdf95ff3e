// Helpers shared by GPU tests: skip (counted as skipped by ctest) when no CUDA device is present,
// fresh random inputs, poisoned outputs, and the relative-error measure DESIGN.md states
// tolerances in.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/cuda_check.h"
#include "core/dtype.h"

namespace megaops::testing {

inline bool have_cuda_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Fresh seed per test run unless MEGAOPS_TEST_SEED is set (printed so a failure can be replayed).
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("MEGAOPS_TEST_SEED");
    uint64_t s = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("MEGAOPS_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// Decode steps a long-running GPU test runs: `full` unless MEGAOPS_TEST_STEPS (1..full) asks for
// fewer. The sanitizer runs set it (gpu_run.sh sanitize): under racecheck a tiny-model overlap
// case takes about a minute at 64 steps, and the sanitizers look for hazards, which a few steps
// through every kernel already exercise.
inline int test_steps(int full) {
  const char* env = std::getenv("MEGAOPS_TEST_STEPS");
  if (env == nullptr) return full;
  const long v = std::strtol(env, nullptr, 10);
  return v >= 1 && v < full ? static_cast<int>(v) : full;
}

inline std::vector<float> random_floats(size_t n, float lo, float hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// ||out - ref|| / ||ref||; infinity when out holds a NaN or Inf.
inline double rel_error(const float* out, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1e-30));
}

// A device buffer of T, freed on scope exit.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    MEGAOPS_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(count, 1) * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& h) {
    MEGAOPS_CUDA_CHECK(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    MEGAOPS_CUDA_CHECK(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  // Fills with 0xFF bytes: NaN for float and bf16, so an unwritten output fails the test.
  void poison() { MEGAOPS_CUDA_CHECK(cudaMemset(ptr, 0xff, n * sizeof(T))); }
};

// bf16 bits of host floats, and back.
inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}
inline std::vector<float> from_bf16_bits(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
  return out;
}

}  // namespace megaops::testing

#define MEGAOPS_REQUIRE_GPU()                                                      \
  do {                                                                             \
    if (!::megaops::testing::have_cuda_device()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
