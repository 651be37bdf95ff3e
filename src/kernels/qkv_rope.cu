// QKV post-processing: one warp per (token, head) over the token's q, k and v heads. q and k heads
// get the optional per-head RMSNorm (Qwen3) then RoPE; v heads are copied. q goes to q_out, k and
// v to the KV cache at (slot, position). A lane owns the rotate_half pairs (i, i + hd/2) for
// i in {2*lane, 2*lane+1} (+64 for head_dim > 128), so the norm needs one warp reduction and
// RoPE needs no data exchange. Limits: head_dim % 4 == 0 and head_dim <= 256. The kernel is
// instantiated per qkv type (bf16 or fp32); the outputs are bf16 either way.
#include <algorithm>

#include "kernels/qkv_rope.cuh"
#include "kernels/qkv_rope_head.cuh"

namespace megaops {
namespace {

constexpr int QKV_ROPE_WARPS = 4;

template <typename T>
__global__ void __launch_bounds__(QKV_ROPE_WARPS * 32) qkv_rope_kernel(QkvRopeParams p) {
  const int64_t total = static_cast<int64_t>(p.t) * (p.num_heads + 2 * p.num_kv_heads);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * QKV_ROPE_WARPS + threadIdx.x / 32;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * QKV_ROPE_WARPS;
  const uint32_t step = tile_sync_step(p.sync);
  QkvRopeConsts c;
  if (first < total) c = qkv_rope_load_consts(p, first);
  tile_sync_wait(p.sync, step);
  pdl_launch_dependents();
  // One iteration per warp at the default grid; a capped grid (overlap CTA budget) strides. The
  // loop bound depends only on the warp index, so every lane of a warp runs the same iterations
  // (qkv_rope_head uses warp shuffles). qkv is read with ordinary loads (coherent after the wait).
  for (int64_t item = first; item < total; item += stride) {
    if (item != first) c = qkv_rope_load_consts(p, item);
    qkv_rope_head<T>(p, item, c);
  }
  tile_sync_signal(p.sync, step);
}

bool aligned4(const void* ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 3u) == 0;
}

bool aligned8(const void* ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 7u) == 0;
}

int64_t qkv_rope_blocks(const QkvRopeParams& p) {
  const int64_t total = static_cast<int64_t>(p.t) * (p.num_heads + 2 * p.num_kv_heads);
  int64_t blocks = (total + QKV_ROPE_WARPS - 1) / QKV_ROPE_WARPS;
  if (p.max_ctas > 0) blocks = std::min<int64_t>(blocks, p.max_ctas);
  return blocks;
}

}  // namespace

cudaError_t qkv_rope_footprint(const QkvRopeParams& p, KernelFootprint* out) {
  const int blocks = static_cast<int>(std::min<int64_t>(qkv_rope_blocks(p), 0x7fffffff));
  if (p.qkv_f32)
    return kernel_footprint(qkv_rope_kernel<float>, blocks, QKV_ROPE_WARPS * 32, 0, out);
  return kernel_footprint(qkv_rope_kernel<bf16>, blocks, QKV_ROPE_WARPS * 32, 0, out);
}

cudaError_t preload_qkv_rope_kernels() {
  const cudaError_t err = preload_kernel(qkv_rope_kernel<float>);
  return err != cudaSuccess ? err : preload_kernel(qkv_rope_kernel<bf16>);
}

cudaError_t launch_qkv_rope(const QkvRopeParams& p) {
  if (p.t < 0 || p.num_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 ||
      p.head_dim % 4 != 0 || p.head_dim > QKV_ROPE_MAX_HEAD_DIM || p.max_seq <= 0 ||
      p.num_heads % p.num_kv_heads != 0 || !(p.eps >= 0.0f) || !kv_pages_valid(p.kv, p.max_seq))
    return cudaErrorInvalidValue;
  if (p.t == 0) return cudaSuccess;
  if (p.max_ctas < 0) return cudaErrorInvalidValue;
  if ((p.qkv != nullptr) == (p.qkv_f32 != nullptr)) return cudaErrorInvalidValue;  // exactly one
  if (!p.positions || !p.slots || !p.inv_freq || !p.q_out || !p.k_cache || !p.v_cache)
    return cudaErrorInvalidValue;
  if ((p.qkv && !aligned4(p.qkv)) || (p.qkv_f32 && !aligned8(p.qkv_f32)) || !aligned4(p.q_out) ||
      !aligned4(p.k_cache) || !aligned4(p.v_cache) || (p.q_norm && !aligned4(p.q_norm)) ||
      (p.k_norm && !aligned4(p.k_norm)))
    return cudaErrorInvalidValue;
  const int64_t blocks = qkv_rope_blocks(p);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  if (p.qkv_f32)
    return launch_kernel(qkv_rope_kernel<float>, dim3(static_cast<unsigned>(blocks)),
                         dim3(QKV_ROPE_WARPS * 32), 0, p.launch, p);
  return launch_kernel(qkv_rope_kernel<bf16>, dim3(static_cast<unsigned>(blocks)),
                       dim3(QKV_ROPE_WARPS * 32), 0, p.launch, p);
}

}  // namespace megaops
