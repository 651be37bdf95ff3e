// Standalone timing of one decode matmul on one kernel (`megaops bench-matmul`): a CUDA graph of
// dependent launches whose weights rotate through copies that together exceed the L2 cache, so
// every launch streams its weights from HBM, as in a decode step. Pure C++ header (the CLI is
// compiled without CUDA headers).
#pragma once

#include <cstdint>
#include <string>

namespace megaops {

struct MatmulBenchCase {
  int m = 1, n = 0, k = 0;
  std::string path = "small";  // small, stream, cublaslt or cublaslt-tuned
  int stream_stages = 0;       // ring slots of the streaming kernel, 0 = its default
  int launches = 40;           // per graph replay
  int repeats = 5;             // graph replays timed
  bool pdl = false;
};

struct MatmulBenchTime {
  double median_us = 0, min_us = 0, max_us = 0;  // per launch
  int weight_copies = 0;
};

// True when `path` can run the case's shape (the streaming kernel takes m <= 4 and k whose x fits
// its shared memory; the small-m kernel m <= 64).
bool matmul_bench_supported(const MatmulBenchCase& c);

// Times the case on the current device. Throws InputError for an unknown path or an unsupported
// shape, DeviceError (CUDA's message) when a launch fails.
MatmulBenchTime time_matmul(const MatmulBenchCase& c);

}  // namespace megaops
