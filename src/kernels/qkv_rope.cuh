// Post-processing of the fused QKV projection for each token: Qwen3's per-head q/k RMSNorm (when
// the norm weights are given), RoPE on q and k (HF rotate_half convention, inverse frequencies
// precomputed with llama3 scaling by the host), then q to q_out and k, v into the KV cache at the
// token's (slot, position), contiguous or through a block table (kernels/kv_pages.cuh). The qkv
// input comes from a matmul and may be bf16 (qkv) or fp32 (qkv_f32, rounded to bf16 only at the
// outputs): exactly one of the two is set. Requires head_dim % 4 == 0, head_dim <= 256, 4-byte
// aligned bf16 buffers and an 8-byte aligned qkv_f32; a position outside [0, max_seq) writes q_out
// but skips the cache.
#pragma once

#include "kernels/common.cuh"
#include "kernels/kv_pages.cuh"
#include "kernels/tile_sync.cuh"

namespace megaops {

struct QkvRopeParams {
  const bf16* qkv = nullptr;           // [t, (num_heads + 2 * num_kv_heads) * head_dim]: q | k | v
  const float* qkv_f32 = nullptr;      // same, fp32; exactly one of qkv, qkv_f32
  const int32_t* positions = nullptr;  // [t]
  const int32_t* slots = nullptr;      // [t]: each token's cache slot (block-table row if paged)
  const bf16* q_norm = nullptr;        // [head_dim] or null
  const bf16* k_norm = nullptr;        // [head_dim] or null
  const float* inv_freq = nullptr;     // [head_dim / 2]
  bf16* q_out = nullptr;               // [t, num_heads, head_dim]
  bf16* k_cache = nullptr;             // [max_batch, max_seq, num_kv_heads, head_dim] or paged
  bf16* v_cache = nullptr;             // same
  KvPages kv;                          // the cache's paging (kernels/kv_pages.cuh)
  int t = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, max_seq = 0;
  float eps = 1e-6f;  // for the q/k norms
  int max_ctas = 0;   // grid cap (0 = one warp per head); warps then stride over the heads
  TileSync sync;      // overlap hooks (kernels/tile_sync.cuh); one signal per CTA
  LaunchOptions launch;
};

cudaError_t launch_qkv_rope(const QkvRopeParams& p);
// The launch launch_qkv_rope(p) makes (with p.max_ctas) and its occupancy.
cudaError_t qkv_rope_footprint(const QkvRopeParams& p, KernelFootprint* out);
cudaError_t preload_qkv_rope_kernels();

}  // namespace megaops
