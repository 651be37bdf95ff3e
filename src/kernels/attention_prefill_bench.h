// Standalone timing of causal prefill attention (`megaops bench-attention`): one sequence of
// `tokens` tokens in slot 0 of a KV cache [1, tokens, num_kv_heads, head_dim], random bf16
// inputs, each kernel timed with events (median of `repeats` after a warm-up launch), and each
// kernel's output compared with the first kernel's. Pure C++ header (the CLI is compiled without
// CUDA headers).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace megaops {

struct AttentionBenchShape {
  int tokens = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
};

// flash: launch_prefill_attention_flash (kernels/attention_prefill.cuh) with its default query
// block; flash-64 / flash-128: with 64 / 128 query rows a CTA; scalar: launch_prefill_attention
// (kernels/attention.cu); cudnn: cuDNN's fused SDPA (kernels/attention_cudnn.h).
inline bool attention_bench_kernel_known(const std::string& k) {
  return k == "flash" || k == "flash-64" || k == "flash-128" || k == "scalar" || k == "cudnn";
}

struct AttentionBenchTime {
  std::string kernel;
  int block_q = 0;  // flash kernels: the query rows a CTA took
  double median_ms = 0, min_ms = 0, max_ms = 0;
  // ||out - out_first|| / ||out_first||, out_first the output of the first kernel that ran, on
  // the same inputs (0 for that kernel itself; infinite when either holds a NaN).
  double rel_diff = 0;
  // cudnn: milliseconds its graph for this shape took to build (heuristics + plan; not timed).
  double build_ms = 0;
  // Non-empty when the kernel could not run this shape (cuDNN unavailable or without a plan):
  // why, in one line; no times then.
  std::string error;
};

struct AttentionBenchResult {
  std::vector<AttentionBenchTime> times;  // one per kernel asked for, in order
};

// Causal FLOPs of the shape: 4 * T^2 * H * d / 2 (QK^T and PV, half the square).
inline double attention_causal_flops(const AttentionBenchShape& s) {
  return 4.0 * s.tokens * static_cast<double>(s.tokens) * s.num_heads * s.head_dim / 2;
}

// Times kernels on shapes; keeps what outlives one shape (cuDNN's library, handle and built
// graphs, made on the first use of the cudnn kernel).
class AttentionBench {
 public:
  // cudnn_lib: the cuDNN library the cudnn kernel loads (empty: libcudnn.so.9).
  explicit AttentionBench(std::string cudnn_lib = "");
  ~AttentionBench();
  AttentionBench(const AttentionBench&) = delete;
  AttentionBench& operator=(const AttentionBench&) = delete;

  // Each kernel on one sequence of s.tokens tokens, `repeats[i]` timed launches of kernel i.
  // Throws InputError on an unknown kernel or a bad shape, DeviceError when a launch fails; a
  // cudnn kernel that cannot run comes back with its error set.
  AttentionBenchResult time(const AttentionBenchShape& s, const std::vector<std::string>& kernels,
                            const std::vector<int>& repeats);

  // The loaded cuDNN ("9.19.0 (libcudnn.so.9)"), or why it is unavailable; "" before the cudnn
  // kernel was asked for.
  std::string cudnn_description() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Median milliseconds of a bf16 cuBLASLt GEMM n x n x n (the tensor-core ceiling in the same run).
double time_gemm_ceiling_ms(int n, int repeats);

}  // namespace megaops
