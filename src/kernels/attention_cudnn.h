// Causal prefill attention on cuDNN's fused scaled-dot-product attention (its flash-attention
// kernels for Hopper: wgmma, TMA, warp specialisation), built through the cudnn-frontend graph
// API (headers from PyPI's nvidia-cudnn-frontend, scripts/fetch_cudnn_frontend.sh). A vendor op
// inside the plan, beside the own tensor-core kernel (kernels/attention_prefill.cuh); which one a
// prefill runs is ExecutorOptions::prefill_attention.
//
// cuDNN is not linked: the library (~500 MB with its engines) is loaded at run time
// (kernels/cudnn_library.h), so a binary without it on the machine still runs, and reports why
// this path is unavailable instead. The integration point is one sequence at a time: q rows of
// the sequence, and its keys and values at contiguous positions (the KV cache's rows of one slot,
// or a gathered copy), so a cache layout change touches only the caller.
//
// Plain C++ (compiled without nvcc): the frontend's templates stay out of the CUDA sources.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

namespace megaops {

// One sequence's causal attention: t_q query rows that are the last t_q of t_kv positions. Query
// row i sits at position t_kv - t_q + i and attends keys [0, t_kv - t_q + i] (GQA: query head h
// reads kv head h / (num_heads / num_kv_heads)). bf16 in and out, fp32 softmax and accumulation.
struct CudnnAttentionParams {
  const __nv_bfloat16* q = nullptr;  // [t_q, num_heads, head_dim]
  const __nv_bfloat16* k = nullptr;  // [t_kv, num_kv_heads, head_dim], rows kv_row_stride apart
  const __nv_bfloat16* v = nullptr;  // as k
  __nv_bfloat16* out = nullptr;      // [t_q, num_heads * head_dim]
  int t_q = 0, t_kv = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  // Elements from one position of k / v to the next; 0 = num_kv_heads * head_dim (packed).
  int64_t kv_row_stride = 0;
  float scale = 1.0f;
  cudaStream_t stream = nullptr;
};

class CudnnAttention {
 public:
  // Loads cuDNN (`lib`: a file name or path, empty = libcudnn.so.9 from the loader's search
  // path; one library per process) and creates a handle on the current device. Never throws:
  // where cuDNN cannot be loaded or initialised, available() is false and unavailable_reason()
  // says why in one line.
  explicit CudnnAttention(const std::string& lib = "");
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  bool available() const;
  const std::string& unavailable_reason() const;
  // The loaded library's version (cudnnGetVersion, e.g. 91900) and its path; 0 / "" when none.
  int version() const;
  std::string library_path() const;

  // Enqueues p on p.stream. A graph is built (cuDNN's heuristics, then its plan) the first time a
  // shape is seen and cached (the most recently used 64 shapes). Returns:
  //   cudaSuccess;
  //   cudaErrorInvalidValue: bad shape, or a pointer or stride not 16-byte aligned; nothing runs;
  //   cudaErrorNotSupported: cuDNN is unavailable or has no plan for this shape (last_error()
  //     says why; such a shape is remembered, not tried again); nothing runs, the caller may
  //     take another kernel;
  //   another error: cuDNN failed while running (last_error()).
  // t_q == 0 is a no-op.
  cudaError_t run(const CudnnAttentionParams& p);
  const std::string& last_error() const;

  // Graphs built so far and the wall milliseconds spent building them (heuristics + plan).
  int graphs_built() const;
  double build_ms() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megaops
