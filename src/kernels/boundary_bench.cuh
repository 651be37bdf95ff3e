// What a kernel boundary costs inside a CUDA graph, plain and under PDL: the planner's launch_us
// and pdl_wait_us (planner/planner.h CostModel) as evidence instead of constants. Three graphs read
// the same bytes with the HBM read kernel (kernels/hbm_read.cuh): one flat read, and `kernels`
// dependent reads of equal slices, launched plain or with PDL. Each chained read loads its slice,
// then (under PDL) waits for its predecessor's grid, then reads the word its predecessor wrote and
// writes that word + 1: so the chain is ordered through memory, as a step's ops are, and a wait
// that let a kernel run early would be seen.
// The boundary cost is (chain - flat) / (kernels - 1).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace megaops {

struct BoundaryBenchResult {
  int kernels = 0;
  size_t bytes_per_kernel = 0;
  int iterations = 0;
  double flat_us = 0;   // median: one read of kernels x bytes_per_kernel
  double plain_us = 0;  // median: the chain, plain launches
  double pdl_us = 0;    // median: the chain, PDL launches (slices loaded before the wait)
  // The chain's words after the last replay of each chain: k + 1 for kernel k when every kernel
  // read its predecessor's word after the predecessor wrote it.
  std::vector<unsigned> plain_words, pdl_words;
  double plain_boundary_us() const { return (plain_us - flat_us) / (kernels - 1); }
  double pdl_boundary_us() const { return (pdl_us - flat_us) / (kernels - 1); }
};

// Times the three graphs on the current device, `iterations` replays each after a warm-up, and
// returns their medians. InputError unless kernels >= 2, bytes_per_kernel >= 16 and
// iterations >= 1; DeviceError on CUDA failures.
BoundaryBenchResult measure_kernel_boundaries(size_t bytes_per_kernel, int kernels, int iterations);

}  // namespace megaops
