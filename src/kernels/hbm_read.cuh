// The HBM read ceiling: a plain streaming-read kernel and a host helper that times it. Benchmarks
// report their bandwidth as a fraction of what this kernel reads on the same GPU in the same run,
// so a result never leans on a datasheet figure.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/common.cuh"

namespace megaops {

struct HbmReadParams {
  const void* data = nullptr;  // 16-byte aligned
  size_t bytes = 0;            // multiple of 16
  unsigned* sink = nullptr;    // one word the kernel may write, so the reads cannot be elided
  LaunchOptions launch;
  // A chain of reads ordered through memory (kernels/boundary_bench.cuh): after its bytes (and,
  // launched with PDL, its wait for the read before it) the kernel writes *out = *prev + 1 (0 + 1
  // without prev). Both null: a plain read.
  const unsigned* prev = nullptr;
  unsigned* out = nullptr;
};

// Reads every byte of `data` once with 16-byte loads; returns the launch status.
cudaError_t hbm_read(const HbmReadParams& p);

// Allocates `bytes` of device memory (rounded down to 16), warms up, times `iterations` reads with
// CUDA events and returns the median bandwidth in GB/s (1e9 bytes per second). Throws DeviceError
// on CUDA failures and InputError when bytes < 16 or iterations < 1.
double measure_hbm_read_gbps(size_t bytes, int iterations);

}  // namespace megaops
