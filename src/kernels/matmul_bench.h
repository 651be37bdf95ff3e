// Standalone timing of one decode matmul on one kernel (`megaops bench-matmul`): a CUDA graph of
// dependent launches whose weights rotate through copies that together exceed the L2 cache, so
// every launch streams its weights from HBM, as in a decode step. Pure C++ header (the CLI is
// compiled without CUDA headers).
#pragma once

#include <cstdint>
#include <iterator>
#include <string>

namespace megaops {

// The kernels bench-matmul times: small-m, the streaming kernel (its cp.async ring; stream-bulk:
// its bulk-copy version, sm_90), cuBLASLt (the heuristic's first answer; -tuned: the fastest of
// its candidates, as the executor's tuning runs it), and read: no matmul, the HBM ceiling's read
// kernel over the same weight bytes in the same graph of launches, the floor a matmul of that
// shape reaches at best (ramp and launch boundary included).
inline constexpr const char* MATMUL_BENCH_PATHS[] = {"small",    "stream",         "stream-bulk",
                                                     "cublaslt", "cublaslt-tuned", "read"};
// "small, stream, ... or read", for error messages.
inline std::string matmul_bench_paths_text() {
  std::string t;
  const size_t n = std::size(MATMUL_BENCH_PATHS);
  for (size_t i = 0; i < n; ++i)
    t += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + MATMUL_BENCH_PATHS[i];
  return t;
}
inline bool matmul_bench_path_known(const std::string& p) {
  for (const char* q : MATMUL_BENCH_PATHS)
    if (p == q) return true;
  return false;
}
// The paths that run a version of the streaming kernel (they take ring slots, --stages).
inline bool matmul_bench_path_streams(const std::string& p) {
  return p == "stream" || p == "stream-bulk";
}

struct MatmulBenchCase {
  int m = 1, n = 0, k = 0;
  std::string path = "small";  // one of MATMUL_BENCH_PATHS
  int stream_stages = 0;       // ring slots of the streaming kernels, 0 = their default
  int launches = 40;           // per graph replay
  int repeats = 5;             // graph replays timed
  bool pdl = false;
};

struct MatmulBenchTime {
  double median_us = 0, min_us = 0, max_us = 0;  // per launch
  int weight_copies = 0;
};

// True when `path` can run the case's shape on the current device (the streaming kernel takes
// m <= 2 and k whose x fits its shared memory, its bulk version an sm_90 GPU; the small-m kernel
// m <= 64).
bool matmul_bench_supported(const MatmulBenchCase& c);

// Times the case on the current device. Throws InputError for an unknown path or an unsupported
// shape, DeviceError (CUDA's message) when a launch fails.
MatmulBenchTime time_matmul(const MatmulBenchCase& c);

}  // namespace megaops
